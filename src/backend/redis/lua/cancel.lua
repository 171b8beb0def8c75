-- Cancels a job: deletes it from its queue at any priority and frees its unique
-- key. A job that runs is deleted too: its worker's next lease renewal finds it
-- gone and cancels the run, which is then neither retried nor recorded.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique)
-- KEYS[4..23]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[24]  the queue's lease counts (ns:q:leases): a lease leaves them
-- KEYS[25], KEYS[26]  the queue's history (ns:q:history:ids, ns:q:history:Q): the
--          job is entered there as cancelled, with who cancelled it, its
--          attempt records, type and body (see complete.lua)
-- KEYS[27], KEYS[28]  the queue's keyed set and concurrency keys (ns:q:keyed,
--          ns:q:keys, see concurrency_keys in lib.lua): a keyed job waiting
--          for its key is cancelled from there; one that held a place frees
--          it for the key's next job
-- KEYS[29]  the queue's wake set (ns:q:kwake, see fetch.lua): a running
--          keyed job cancelled keeps its place until its lease ends
-- KEYS[30]  the queue's awaited jobs (ns:q:awaited, see await.lua): a caller
--          awaiting the job learns it on the done channel (ns:@done:q)
-- KEYS[31]  the queue's batch finishes (ns:q:bout, see complete.lua): a job of
--          a batch (its body's last member "batch":"<batch id>:<index>") is
--          entered there as cancelled, for its batch to count
-- KEYS[32]  the queue's waited-for jobs (ns:q:deps, see dep.lua): the flows
--          that wait for the job learn it cancelled, as its batch does
-- ARGV[1]  the id
-- ARGV[2]  who cancels it ("api", "cli alice", "dashboard", ...)
-- ARGV[3]  the history setting when the queue stores none
-- ARGV[4]  the queue's realtime channel (ns:rt:q): a job promoted in its key's
--          place wakes the queue's workers
-- Returns {-1} when the queue does not exist, {0} when the job is not in it,
--         {1} when it was waiting (removed), {2} when it was leased
--         (cancelling); then the batch finishes entered, if any
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio", "redjob:unique", "redjob:history",
  "redjob:keyed", "redjob:awaited")
if not attrs[1] then return {-1} end
local now = clock()
local id = ARGV[1]
local level, s = find_level(tonumber(attrs[2]) or 0, 4, id)
local K = attrs[5] and concurrency_keys(27, 28, 1, now, 29)
local kept = redis.call("HMGET", KEYS[2], id, id .. ":a")
-- its concurrency key, "<per key> <key>": the history keeps it
local keyed
if not level then
  -- a keyed job waiting for its key (its count: its member's)
  if not K or not kept[1] then return {0} end
  local v = redis.call("HGET", KEYS[2], id .. ":k")
  if not v then return {0} end
  local waited, _, of = K.gone({id})
  if waited == 0 then return {0} end
  K.save()
  keyed = K.get(of[id]).per .. " " .. of[id]
  s = string.format("%.0f.%s", tonumber(string.sub(v, 1, 16)), string.sub(v, 17, 19))
else
  redis.call("ZREM", level[2], id)
end
redis.call("HDEL", KEYS[2], id, id .. ":rc", id .. ":fr", id .. ":err", id .. ":a")
if K and level then
  -- a running job keeps its key's place until its lease ends (its handler
  -- stops at its next lease renewal)
  local sc = tonumber(s)
  local running = {}
  if select(2, score_count(sc)) and math.floor(sc) >= now then running[id] = math.floor(sc) end
  local _, promoted, of = K.gone({id}, running)
  if of[id] then keyed = K.get(of[id]).per .. " " .. of[id] end
  K.save()
  if promoted > 0 then redis.call("PUBLISH", ARGV[4], redis.call("ZCARD", KEYS[1])) end
end
local on, keep, age, args = history_setting(attrs[4], ARGV[3])
if on then
  -- a running job's run is recorded, as its settle would have
  if level then kept[2] = cancelled_run(kept[2], tonumber(s), now) end
  enter_history(25, 26, id, "cancelled", score_count(tonumber(s)), kept, ARGV[2], now, keep, age, args, keyed,
    level and level[1])
end
forget_released({id})
notify_awaited(30, {id}, ARGV[4], attrs[6])
if attrs[3] == "1" then release_unique(KEYS[3], {id}) end
lease_counts().left(24, {tonumber(s)}, now)
-- a batch's job: its batch counts it cancelled (the member with_batch adds
-- last, before a callback's "batch_done")
local out = {1}
local body = kept[1] or ""
local b, idx = string.match(body, '"batch":"(%w+):(%d+)"}%s*$')
if not b then b, idx = string.match(body, '"batch":"(%w+):(%d+)","batch_done":') end
local members = {}
if b then members[1] = b .. " " .. idx .. "c" .. id end
local regs = KEYS[32] and take_waiting(32, {id})[1]
if regs then
  for wb, widx in string.gmatch(regs, "(%w+) (%d+)") do members[#members + 1] = wb .. " " .. widx .. "c" .. id end
end
if #members > 0 and KEYS[31] then
  local at = string.format("%.0f", now)
  for _, m in ipairs(members) do
    redis.call("ZADD", KEYS[31], at, m)
    out[#out + 1] = m
  end
  if not redis.call("HGET", KEYS[2], "redjob:bout") then redis.call("HSET", KEYS[2], "redjob:bout", at) end
end
local score = tonumber(s)
if select(2, score_count(score)) and score >= now + 1 then out[1] = 2 end
-- a lease an earlier redjob wrote (see LEGACY in lib.lua) that still runs
if now < LEGACY and score >= LEGACY and score - LEGACY >= now + 1 then out[1] = 2 end
return out
