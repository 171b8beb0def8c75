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
-- KEYS[26..28]  the history's two keys (not read) and the queue's keyed set
--          (ns:q:keyed), whose jobs are blocked (optional when alone)
-- ARGV[1]  "overview" for the overview's lines (see overview.rs) of several
--          queues at once: their latency, pause and counters too, each
--          queue's keys 29 in a row (KEYS[1..28] as above, then its counters
--          ns:q:stats), as many queues as KEYS holds; else nothing (the
--          rings of the counters are read apart, see overview.rs)
-- Returns {-1} when the queue does not exist, else {1, ready (due, or a lease that
--         ran out), scheduled (delayed, or waiting for a retry), in flight (leased), dead,
--         blocked (waiting for their concurrency keys; alone, only with KEYS[28])};
--         for an overview, one such reply per queue, each followed by Redis's
--         clock (ms), how long the oldest ready job has waited (ms; -1 for
--         none), 1 when paused (else 0), processed, failed, retried and
--         dead-lettered runs
local now = clock()
local overview = ARGV[1] == "overview"
local leases = lease_counts()
-- the bounds every queue's counts use, formatted once (formatting a number
-- costs about as much as a command)
local due = due_max(now)
local n = string.format("%.0f", now + 1)
-- the rest of this second: its leases by their marks
local rest = string.format("(%.0f", (math.floor(now / 1000) + 1) * 1000)
local legacy_from = string.format("%.0f", LEGACY)
local legacy_out = string.format("(%.0f", LEGACY + now + 1)
local legacy_in = string.format("%.0f", LEGACY + now + 1)

-- The counts of the queue whose keys start at KEYS[b + 1] (see above).
local function count(b)
  local attrs = redis.call("HMGET", KEYS[b + 2], "vt", "redjob:prio", "redjob:paused", "redjob:current")
  if not attrs[1] then return {-1} end
  -- leases an earlier redjob wrote are looked for until a fetch found none
  -- left ("redjob:current", see fetch.lua)
  local legacy = now < LEGACY and not attrs[4]
  local ready, later = 0, 0
  local leased = 0
  local marked, whole = 0, true
  -- for an overview: the earliest due time of a due job, over the levels
  local oldest
  for _, level in ipairs(level_sets(tonumber(attrs[2]) or 0, b + 5, b + 1)) do
    local k = level[2]
    local d = redis.call("ZCOUNT", k, "-inf", due)
    ready = ready + d
    if overview and d > 0 then
      local first = redis.call("ZRANGEBYSCORE", k, "-inf", due, "WITHSCORES", "LIMIT", 0, 1)
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
    if legacy then
      local ran_out = redis.call("ZCOUNT", k, legacy_from, legacy_out)
      ready = ready + ran_out
      later = later - ran_out
      leased = leased + redis.call("ZCOUNT", k, legacy_in, "+inf")
    end
  end
  local after, this = leases.after(b + 25, now)
  leased = leased + after + (whole and marked or this)
  leased = math.min(leased, later)
  local out = {1, ready, later - leased, leased, redis.call("ZCARD", KEYS[b + 3])}
  -- the keyed jobs waiting for their keys' places (ns:q:keyed)
  if #KEYS >= b + 28 then out[6] = redis.call("ZCARD", KEYS[b + 28]) end
  if not overview then return out end
  -- a ran-out lease an earlier redjob wrote counts as ready without a due time
  -- among the due ones: its wait is not known, and left out
  out[7] = now
  out[8] = oldest and math.max(0, now - oldest) or -1
  out[9] = attrs[3] and 1 or 0
  local c = redis.call("HMGET", KEYS[b + 29], "processed", "failed", "retried", "dead")
  for j = 1, 4 do out[9 + j] = tonumber(c[j]) or 0 end
  return out
end

if not overview then return count(0) end
local all = {}
for b = 0, #KEYS - 29, 29 do all[#all + 1] = count(b) end
return all
