-- Deletes messages, at any priority: their sorted set members and their body, rc,
-- fr, last error and attempt fields, and frees the unique keys they held.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique)
-- KEYS[4..23]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[24]  the queue's lease counts (ns:q:leases): leases leave them
-- ARGV     message ids
-- Returns {members removed from the sorted sets, fields removed from the hash}
local fields = {}
for _, id in ipairs(ARGV) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
  fields[#fields + 1] = id .. ":err"
  fields[#fields + 1] = id .. ":a"
end
local attrs = redis.call("HMGET", KEYS[2], "redjob:prio", "redjob:unique")
-- only the levels a send ever used (see fetch.lua)
local n = 0
local now = clock()
local leases = lease_counts()
for _, level in ipairs(level_sets(tonumber(attrs[1]) or 0, 4)) do
  local scores = {}
  for _, s in ipairs(many("ZMSCORE", level[2], ARGV)) do
    if s then scores[#scores + 1] = tonumber(s) end
  end
  local _, m = many("ZREM", level[2], ARGV)
  n = n + m
  leases.left(24, scores, now)
end
local _, h = many("HDEL", KEYS[2], fields)
forget_released(ARGV)
if attrs[2] == "1" then release_unique(KEYS[3], ARGV) end
return {n, h}
