-- Renews a consumer's hold on events it is running: their idle time starts over,
-- so no other consumer claims them. An event another consumer took meanwhile is
-- left to it.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- ARGV[1]  the subscriber, ARGV[2] this consumer
-- ARGV[3..] event ids
-- Returns per id 1 (still held, renewed), 0 (another consumer holds it) or -1
-- (pending for no consumer: the subscriber, or its topic, is gone or made
-- anew, or another client acknowledged it)
local key, group, me = KEYS[1], ARGV[1], ARGV[2]
local out = {}
for i = 3, #ARGV do
  local p = redis.pcall("XPENDING", key, group, ARGV[i], ARGV[i], 1)
  if not p.err and p[1] and p[1][2] == me then
    redis.call("XCLAIM", key, group, me, 0, ARGV[i], "JUSTID")
    out[#out + 1] = 1
  elseif not p.err and p[1] then
    out[#out + 1] = 0
  else
    out[#out + 1] = -1
  end
end
return out
