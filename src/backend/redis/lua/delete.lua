-- Deletes messages, at any priority: their sorted set members and their body, rc,
-- fr, last error and attempt fields, and frees the unique keys they held. The
-- queue's history keeps what was deleted: a single id given, the job as an
-- entry ("deleted", with its attempt records, type and body, see complete.lua);
-- several, one event "<ms> deleted <count> <who>" in its "~events" field (on the
-- call that ends a batch, with the batch's total; none when it deleted none).
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique)
-- KEYS[4..23]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[24]  the queue's lease counts (ns:q:leases): leases leave them
-- KEYS[25], KEYS[26]  the queue's history (ns:q:history:ids, ns:q:history:Q)
-- KEYS[27], KEYS[28]  the queue's keyed set and concurrency keys (ns:q:keyed,
--          ns:q:keys, see concurrency_keys in lib.lua): a deleted keyed job
--          that waited for its key leaves the keyed set; one that held a
--          place frees it for the key's next job
-- KEYS[29]  the queue's wake set (ns:q:kwake, see fetch.lua): a running
--          keyed job deleted keeps its place until its lease ends, when the
--          key is due there
-- ARGV[1]  the history setting when the queue stores none
-- ARGV[2]  "one" when this call deletes one id given alone; else "" or, on the
--          call that ends a batch, the batch's earlier calls' count ("0"
--          and up); "-" for a call that is not the last
-- ARGV[3]  who deletes ("api", "cli alice", "dashboard")
-- KEYS[30]  the queue's awaited jobs (ns:q:awaited, see await.lua): a caller
--          awaiting a deleted job learns it on the done channel (ns:@done:q)
-- ARGV[4]  the queue's realtime channel (ns:rt:q): deleting a leased job frees
--          its place under a global concurrency, which wakes the workers a
--          fetch held back (hash field "redjob:held", see fetch.lua)
-- KEYS[31]  optional: the queue's batch finishes (ns:q:bout, see complete.lua):
--          a deleted job of a batch (its body's last member "batch":"<batch
--          id>:<index>") is entered there as cancelled, for its batch to count
-- KEYS[32]  the queue's waited-for jobs (ns:q:deps, see dep.lua): the flows
--          that wait for a deleted job learn it cancelled
-- ARGV[5..]  message ids
-- Returns {members removed from the sorted sets, fields removed from the hash,
--         how many of them ran (leased, their lease not over: the caller
--         tells their workers), then the batch finishes entered}
local ids = {}
for j = 5, #ARGV do ids[#ids + 1] = ARGV[j] end
local fields = {}
for _, id in ipairs(ids) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
  fields[#fields + 1] = id .. ":err"
  fields[#fields + 1] = id .. ":a"
end
local attrs = redis.call("HMGET", KEYS[2], "redjob:prio", "redjob:unique", "redjob:history", "redjob:held",
  "redjob:keyed", "redjob:waiting", "redjob:awaited", "redjob:deps", "redjob:bout")
-- the jobs there (their bodies): a batch's or one flows wait for is counted
-- cancelled once it is gone
local bodies = KEYS[31] and many("HMGET", KEYS[2], ids) or {}
local on, keep, age, args = history_setting(attrs[3], ARGV[1])
local single = ARGV[2] == "one" and #ids == 1
-- a single job's body and records, for its history entry
local kept = (on and single) and redis.call("HMGET", KEYS[2], ids[1], ids[1] .. ":a") or {}
local found
-- only the levels a send ever used (see fetch.lua)
local n = 0
local now = clock()
local leases = lease_counts()
local freed = false
-- running jobs (leased, their lease not over) by their lease end: a keyed
-- one keeps its key's place until then (see concurrency_keys in lib.lua)
local running = {}
-- (a single job's priority, for its history entry)
local prio
for _, level in ipairs(level_sets(tonumber(attrs[1]) or 0, 4)) do
  local scores = {}
  for j, s in ipairs(many("ZMSCORE", level[2], ids)) do
    if s then
      scores[#scores + 1] = tonumber(s)
      prio = prio or level[1]
      found = found or tonumber(s)
      if select(2, score_count(tonumber(s))) then
        freed = true
        if math.floor(tonumber(s)) >= now then running[ids[j]] = math.floor(tonumber(s)) end
      end
    end
  end
  local _, m = many("ZREM", level[2], ids)
  n = n + m
  leases.left(24, scores, now)
end
local _, h = many("HDEL", KEYS[2], fields)
if freed and attrs[4] == "1" then
  redis.call("HSET", KEYS[2], "redjob:held", "0")
  redis.call("PUBLISH", ARGV[4], redis.call("ZCARD", KEYS[1]))
end
forget_released(ids)
notify_awaited(30, ids, ARGV[4], attrs[7])
if attrs[2] == "1" then release_unique(KEYS[3], ids) end
-- a single job's concurrency key, "<per key> <key>": the history keeps it
local keyed
if attrs[5] then
  local K = concurrency_keys(27, 28, 1, now, 29)
  -- a single job that waited for its key: its member's due and count
  local kv = single and not found and redis.call("HGET", KEYS[2], ids[1] .. ":k")
  local waited, promoted, of = K.gone(ids, running)
  if single and of[ids[1]] then keyed = K.get(of[ids[1]]).per .. " " .. of[ids[1]] end
  K.save()
  n = n + waited
  if waited > 0 and kv then found = tonumber(string.sub(kv, 1, 16)) + tonumber(string.sub(kv, 17, 19)) / 1000 end
  if promoted > 0 and attrs[6] == "1" then
    redis.call("HSET", KEYS[2], "redjob:waiting", "0")
    redis.call("PUBLISH", ARGV[4], redis.call("ZCARD", KEYS[1]))
  end
end
if on and single and found and kept[1] then
  kept[2] = cancelled_run(kept[2], found, now)
  enter_history(25, 26, ids[1], "deleted", score_count(found), kept, ARGV[3], now, keep, age, args, keyed, prio)
elseif on and not single and ARGV[2] ~= "" and ARGV[2] ~= "-" and (tonumber(ARGV[2]) or 0) + n > 0 then
  add_history_event(26, now, "deleted", (tonumber(ARGV[2]) or 0) + n, ARGV[3])
end
local nrunning = 0
for _ in pairs(running) do nrunning = nrunning + 1 end
local out = {n, h, nrunning}
if KEYS[31] then enter_removed(31, 32, ids, bodies, attrs[8], attrs[9], now, out) end
return out
