-- Counts a queue's jobs by state: one ZCOUNT per state and priority level in use,
-- and one read of the lease counts, never a scan. Jobs not due yet are scheduled
-- or leased: the leases in flight are counted by the second they end in
-- (KEYS[25], see lease_counts in lib.lua), those ending in the current second by
-- their marks among the jobs due in the rest of it (at most 1,000 per level;
-- past that, the second's count stands, and a lease of it that ran out counts as
-- in flight until the second is over). A lease an RSMQ client deleted or
-- re-hid counts as in flight until its second has passed.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  dead letters' sorted set (ns:q:dead)
-- KEYS[4]  dead letters' hash (ns:q:dead:Q): not read
-- KEYS[5..24]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[25]  the queue's lease counts (ns:q:leases)
-- Returns {-1} when the queue does not exist, else {1, ready (due, or a lease that
--         ran out), scheduled (delayed, or waiting for a retry), in flight (leased), dead}
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local ready, later = 0, 0
local n = string.format("%.0f", now + 1)
local leased = 0
-- the rest of this second: its leases by their marks
local rest = string.format("(%.0f", (math.floor(now / 1000) + 1) * 1000)
local marked, whole = 0, true
for _, level in ipairs(level_sets(tonumber(attrs[2]) or 0, 5)) do
  local k = level[2]
  ready = ready + redis.call("ZCOUNT", k, "-inf", due_max(now))
  later = later + redis.call("ZCOUNT", k, n, "+inf")
  local soon = redis.call("ZRANGEBYSCORE", k, n, rest, "WITHSCORES", "LIMIT", 0, 1000)
  if #soon >= 2000 then whole = false end
  for j = 2, #soon, 2 do
    if select(2, score_count(tonumber(soon[j]))) then marked = marked + 1 end
  end
  -- leases an earlier redjob wrote (see LEGACY in lib.lua): ready once they
  -- ran out
  if now < LEGACY then
    local ran_out = redis.call("ZCOUNT", k, LEGACY, string.format("(%.0f", LEGACY + now + 1))
    ready = ready + ran_out
    later = later - ran_out
    leased = leased + redis.call("ZCOUNT", k, string.format("%.0f", LEGACY + now + 1), "+inf")
  end
end
local after, this = lease_counts().after(25, now)
leased = leased + after + (whole and marked or this)
leased = math.min(leased, later)
return {1, ready, later - leased, leased, redis.call("ZCARD", KEYS[3])}
