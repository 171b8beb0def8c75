-- Deletes up to ARGV[1] jobs of a queue, at any priority, waiting or running (a
-- running job's worker finds it gone at its next lease renewal and drops its
-- outcome, as after a cancel), freeing their unique keys. The queue, its
-- attributes, counters and dead letters stay. Called until it deletes fewer
-- than asked, so that no call holds Redis long.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique)
-- KEYS[4..23]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- ARGV[1]  the most jobs to delete
-- Returns -1 when the queue does not exist, else how many were deleted
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio", "redjob:unique")
if not attrs[1] then return -1 end
local left, n = tonumber(ARGV[1]), 0
for _, level in ipairs(level_sets(tonumber(attrs[2]) or 0, 4)) do
  if left <= 0 then break end
  local ids = redis.call("ZRANGE", level[2], 0, left - 1)
  if #ids > 0 then
    drop_orphans(level[2], ids)
    many("HDEL", KEYS[2], ids)
    if attrs[3] == "1" then release_unique(KEYS[3], ids) end
    n, left = n + #ids, left - #ids
  end
end
return n
