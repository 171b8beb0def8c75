-- Receives and deletes up to n due messages, as RSMQ's popMessage does (no fr is
-- stored), oldest first; with the level keys, across every priority, highest first.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique): popped jobs free theirs
-- KEYS[4..23]  optional: the sorted sets of priorities 10..1, then -1..-10; without
--          them only priority 0 is read (RSMQ's popMessage)
-- KEYS[24], KEYS[25] (KEYS[4], KEYS[5] without the levels)  the queue's keyed
--          set and concurrency keys (ns:q:keyed, ns:q:keys, see
--          concurrency_keys in lib.lua): a popped keyed job frees its key's
--          place for the key's next job (without them, as from an earlier
--          release, the next send of the key or a fetch's sweep finds the
--          place free)
-- ARGV[1]  the most messages to pop
-- ARGV[2]  optional: the index in KEYS of the queue's batch finishes
--          (ns:q:bout), its waited-for jobs (ns:q:deps) next: a popped job
--          of a batch, or one flows wait for, is entered there as succeeded
--          (taken to be run by its popper; see enter_removed in lib.lua)
-- Returns {-1} when the queue does not exist, else {1, id, body, rc, fr, ...},
--         or {2, n, then n batch finishes entered, id, body, rc, fr, ...}
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio", "totalrecv", "redjob:leased", "redjob:unique",
  "redjob:keyed", "redjob:deps", "redjob:bout")
if not attrs[1] then return {-1} end
-- the keys before the batch finishes'
local kb = tonumber(ARGV[2])
local nk = kb and kb - 1 or #KEYS
local levels = level_sets(tonumber(attrs[2]) or 0, 4)
local now = clock()
local ids = {}
local left = tonumber(ARGV[1])
for _, level in ipairs(levels) do
  if left <= 0 then break end
  local due = redis.call("ZRANGEBYSCORE", level[2], "-inf", due_max(now), "LIMIT", 0, left)
  if #due > 0 then
    many("ZREM", level[2], due)
    for _, id in ipairs(due) do ids[#ids + 1] = id end
    left = left - #due
  end
end
local out = {1}
if #ids == 0 then return out end
local fields = {}
for _, id in ipairs(ids) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
end
local vals = many("HMGET", KEYS[2], fields, 3000)
for _, id in ipairs(ids) do
  fields[#fields + 1] = id .. ":err"
  fields[#fields + 1] = id .. ":a"
end
many("HDEL", KEYS[2], fields)
forget_released(ids)
local n = 0
local popped, bodies = {}, {}
for i, id in ipairs(ids) do
  local body = vals[i * 3 - 2]
  if body then
    popped[#popped + 1] = id
    bodies[#bodies + 1] = body
    n = n + 1
    out[#out + 1] = id
    out[#out + 1] = body
    out[#out + 1] = (tonumber(vals[i * 3 - 1]) or 0) + 1
    out[#out + 1] = tonumber(vals[i * 3]) or now
  end
end
if n > 0 then
  redis.call("HINCRBY", KEYS[2], "totalrecv", n)
  -- a pop leaves no rc field behind: when no RSMQ-style receive happened yet
  -- (the counters agree, see fetch.lua), keep them agreeing
  if (tonumber(attrs[3]) or 0) == (tonumber(attrs[4]) or 0) then
    redis.call("HINCRBY", KEYS[2], "redjob:leased", n)
  end
end
if attrs[5] == "1" then release_unique(KEYS[3], ids) end
if attrs[6] and (nk == 5 or nk >= 25) then
  local kz = nk == 5 and 4 or 24
  local K = concurrency_keys(kz, kz + 1, 1, now)
  K.gone(ids)
  K.save()
end
if kb and #popped > 0 then
  local fin = enter_removed(kb, kb + 1, popped, bodies, attrs[7], attrs[8], now, {}, "a")
  if #fin > 0 then
    local with = {2, #fin}
    for _, f in ipairs(fin) do with[#with + 1] = f end
    for i = 2, #out do with[#with + 1] = out[i] end
    return with
  end
end
return out
