-- Appends events to a topic, trimming it by length and by age, or refusing the
-- whole call when it would go over its length once trimmed by age. Trimming is
-- bounded: by length, "~" removes whole nodes, at most 100 nodes' worth of
-- events a call (Redis's default LIMIT); by age, whole nodes of expired events
-- go first, at most 10,000 events, and then, unless that reached its limit (a
-- backlog, which the next publishes go on trimming), the expired rest of the
-- first node, exactly.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- ARGV[1]  the most events to keep (at most 2^63 - 1), "" for no limit
-- ARGV[2]  "refuse" to refuse a publish over the limit, else "trim" the oldest
-- ARGV[3]  the oldest event to keep, in ms before now, "" for no limit
-- ARGV[4..] per event: its type, its data
-- Returns {-1} when refused (no event added), else {0, id, id, ...}
local key, max, refuse, age = KEYS[1], tonumber(ARGV[1]), ARGV[2] == "refuse", tonumber(ARGV[3])
local n = (#ARGV - 3) / 2
-- the age limit is exact once any backlog is gone (a small topic has one node,
-- which "~" never trims); the length limit trims whole nodes
local args = {key}
if age then
  local t = redis.call("TIME")
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local minid = string.format("%d", math.max(now - age, 0))
  -- fewer than half the limit: the next whole node was not all expired (nodes
  -- hold 100 events by default), so what is left expired lies in one node
  if redis.call("XTRIM", key, "MINID", "~", minid, "LIMIT", 10000) < 5000 then
    redis.call("XTRIM", key, "MINID", minid)
  end
elseif max and not refuse then
  args = {key, "MAXLEN", "~", ARGV[1]}
end
-- checked once the expired events are trimmed (up to about 10,000 of them a
-- call: a larger expired backlog refuses a few publishes as it goes)
if max and refuse and redis.call("XLEN", key) + n > max then return {-1} end
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
-- (the limit as given: a Lua number over 2^53 goes to Redis as no integer)
if age and max and not refuse then redis.call("XTRIM", key, "MAXLEN", "~", ARGV[1]) end
return out
