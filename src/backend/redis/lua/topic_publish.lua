-- Appends events to a topic, trimming it by length and by age as each is added,
-- or refusing the whole call when it would go over its length.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- ARGV[1]  the most events to keep, "" for no limit
-- ARGV[2]  "refuse" to refuse a publish over the limit, else "trim" the oldest
-- ARGV[3]  the oldest event to keep, in ms before now, "" for no limit
-- ARGV[4..] per event: its type, its data
-- Returns {-1} when refused (nothing written), else {0, id, id, ...}
local key, max, refuse, age = KEYS[1], tonumber(ARGV[1]), ARGV[2] == "refuse", tonumber(ARGV[3])
local n = (#ARGV - 3) / 2
if max and refuse and redis.call("XLEN", key) + n > max then return {-1} end
-- the age limit is exact (a small topic has one node, which "~" never trims);
-- the length limit trims whole nodes
local args = {key}
if age then
  local t = redis.call("TIME")
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  args = {key, "MINID", string.format("%d", math.max(now - age, 0))}
elseif max and not refuse then
  args = {key, "MAXLEN", "~", ARGV[1]}
end
local n_args = #args
args[n_args + 1] = "*"
args[n_args + 2] = "type"
args[n_args + 4] = "data"
local out = {0}
for i = 4, #ARGV, 2 do
  args[n_args + 3] = ARGV[i]
  args[n_args + 5] = ARGV[i + 1]
  out[#out + 1] = redis.call("XADD", unpack(args))
end
if age and max and not refuse then redis.call("XTRIM", key, "MAXLEN", "~", max) end
return out
