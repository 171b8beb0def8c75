-- Counts a queue's jobs by state, each a range of scores (see LEASED in lib.lua):
-- one ZCOUNT per state and priority level in use, never a scan.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  dead letters' sorted set (ns:q:dead)
-- KEYS[4]  dead letters' hash (ns:q:dead:Q): not read
-- KEYS[5..24]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- Returns {-1} when the queue does not exist, else {1, ready (due, or a lease that
--         ran out), scheduled (delayed, or waiting for a retry), in flight (leased), dead}
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local ready, scheduled, leased = 0, 0, 0
local n, l = string.format("%.0f", now + 1), lease_max(now)
for _, level in ipairs(level_sets(tonumber(attrs[2]) or 0, 5)) do
  local k = level[2]
  ready = ready + redis.call("ZCOUNT", k, "-inf", due_max(now)) + redis.call("ZCOUNT", k, LEASED, l)
  scheduled = scheduled + redis.call("ZCOUNT", k, n, "(" .. LEASED)
  leased = leased + redis.call("ZCOUNT", k, string.sub(l, 2), "+inf")
end
return {1, ready, scheduled, leased, redis.call("ZCARD", KEYS[3])}
