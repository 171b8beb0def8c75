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
-- KEYS[26], KEYS[27]  the queue's history (not read)
-- KEYS[28]  the queue's counters (ns:q:stats), read for an overview
-- ARGV[1]  "overview" for a queue's line of the overview (see overview.rs):
--          its latency, pause and counters too; else nothing
-- ARGV[2]  "minutes" for the overview's line with the last hour's ring
--          ("m0".."m60" of the counters, see complete.lua)
-- Returns {-1} when the queue does not exist, else {1, ready (due, or a lease that
--         ran out), scheduled (delayed, or waiting for a retry), in flight (leased), dead};
--         for an overview, then Redis's clock (ms), how long the oldest ready
--         job has waited (ms; -1 for none), 1 when paused (else 0), processed,
--         failed, retried and dead-lettered runs, then the ring's 61 slots
--         (false where empty) when asked for
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio", "redjob:paused")
if not attrs[1] then return {-1} end
local now = clock()
local ready, later = 0, 0
local n = string.format("%.0f", now + 1)
local leased = 0
-- the rest of this second: its leases by their marks
local rest = string.format("(%.0f", (math.floor(now / 1000) + 1) * 1000)
local marked, whole = 0, true
local overview = ARGV[1] == "overview"
-- for an overview: the earliest due time of a due job, over the levels
local oldest
for _, level in ipairs(level_sets(tonumber(attrs[2]) or 0, 5)) do
  local k = level[2]
  local due = redis.call("ZCOUNT", k, "-inf", due_max(now))
  ready = ready + due
  if overview and due > 0 then
    local first = redis.call("ZRANGEBYSCORE", k, "-inf", due_max(now), "WITHSCORES", "LIMIT", 0, 1)
    local t = first[2] and math.floor(tonumber(first[2]))
    if t and (not oldest or t < oldest) then oldest = t end
  end
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
local out = {1, ready, later - leased, leased, redis.call("ZCARD", KEYS[3])}
if not overview then return out end
-- a ran-out lease an earlier redjob wrote counts as ready without a due time
-- among the due ones: its wait is not known, and left out
out[6] = now
out[7] = oldest and math.max(0, now - oldest) or -1
out[8] = attrs[3] and 1 or 0
local fields = {"processed", "failed", "retried", "dead"}
if ARGV[2] == "minutes" then
  for m = 0, 60 do fields[#fields + 1] = "m" .. m end
end
local c = redis.call("HMGET", KEYS[28], unpack(fields))
for j = 1, 4 do out[8 + j] = tonumber(c[j]) or 0 end
for j = 5, #fields do out[8 + j] = c[j] end
return out
