-- Deletes messages, at any priority: their sorted set members and their body, rc
-- and fr fields.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..]  the sorted sets of the other priorities (ns:q:p<n>)
-- ARGV     message ids
-- Returns {members removed from the sorted sets, fields removed from the hash}
local fields = {}
for _, id in ipairs(ARGV) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
end
-- only the levels a send ever used (see fetch.lua)
local n = 0
for _, level in ipairs(level_sets(tonumber(redis.call("HGET", KEYS[2], "redjob:prio")) or 0)) do
  local _, m = many("ZREM", level[2], ARGV)
  n = n + m
end
local _, h = many("HDEL", KEYS[2], fields)
return {n, h}
