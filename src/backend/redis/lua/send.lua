-- Sends messages to one queue in RSMQ's layout, all or nothing.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV[1]  realtime channel to PUBLISH the queue's length on, or "" for none
-- ARGV[2]  the largest body length (bytes) of the whole batch, checked against maxsize
-- ARGV[3..] three values per message: id suffix (22 chars), when ("" = the queue's
--           delay, "d<ms>" = visible after ms, "a<ms>" = visible at Unix ms), body
-- Returns {1, id...} on success; {-1} when the queue does not exist;
--         {-2, maxlen, maxsize} when a body exceeds the queue's maxsize (nothing sent)
local attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize")
if not attrs[1] then return {-1} end
local maxsize = tonumber(attrs[2])
local maxlen = tonumber(ARGV[2])
if maxsize ~= -1 and maxlen > maxsize then return {-2, maxlen, maxsize} end
local qdelay = tonumber(attrs[1]) * 1000
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local digits = "0123456789abcdefghijklmnopqrstuvwxyz"
local function base36(v)
  local s = ""
  while v > 0 do
    local r = v % 36
    s = string.sub(digits, r + 1, r + 1) .. s
    v = (v - r) / 36
  end
  return string.rep("0", 10 - string.len(s)) .. s
end
local n = (#ARGV - 2) / 3
local zargs, hargs, out = {}, {}, {1}
for i = 1, n do
  local b = (i - 1) * 3 + 3
  -- one microsecond per message keeps a batch's ids in send order
  local id = base36(us + i - 1) .. ARGV[b]
  local when = ARGV[b + 1]
  local score = now + qdelay
  if when ~= "" then
    local v = tonumber(string.sub(when, 2))
    if string.sub(when, 1, 1) == "d" then score = now + v else score = math.max(now, v) end
  end
  zargs[#zargs + 1] = string.format("%.0f", score)
  zargs[#zargs + 1] = id
  hargs[#hargs + 1] = id
  hargs[#hargs + 1] = ARGV[b + 2]
  out[#out + 1] = id
end
many("ZADD", KEYS[1], zargs)
many("HSET", KEYS[2], hargs)
redis.call("HINCRBY", KEYS[2], "totalsent", n)
if ARGV[1] ~= "" then
  redis.call("PUBLISH", ARGV[1], redis.call("ZCARD", KEYS[1]))
end
return out
