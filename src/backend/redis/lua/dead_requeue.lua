-- Requeues dead letters: each goes back to its queue as a fresh job (no
-- deliveries counted, no last error, no attempt records) at the priority it had, under its id. The
-- k-th one requeued (from 0) is due at now + ARGV[1] ms + k * ARGV[2] µs, so a
-- rate spreads a large requeue over time. A letter whose job held a unique key
-- ("<id>:u" in the dead letters' hash, "<expires ms, 0: never> <key>", see
-- complete.lua) takes it again while its lifetime lasts, as a send would; one
-- whose key another queued job holds now (or an earlier letter of this call
-- took) is skipped and stays dead. An id that is not a dead letter, or whose
-- id is in the queue already, is skipped.
-- With a cutoff (a bulk requeue's start, see ops/redis.rs), so is a letter that
-- died after it, and nothing is done until Redis's clock has passed it: a letter
-- requeued here that dies again then dies after the cutoff, and the bulk
-- requeue leaves it. A letter that had a concurrency key ("<id>:k" in the
-- dead letters' hash, "<per key> <key>") enters its key again, as a send does
-- (see concurrency_keys in lib.lua), with its per key when the key has no
-- other jobs (else the key's own). The queue's hash field "redjob:requeued"
-- says a dead letter was ever requeued (see complete.lua). While a purge
-- runs (the hash field "redjob:purging", see purge_mark in lib.lua), a call
-- that requeues a letter sent up to its cutoff counts one move in it: the
-- letter may go behind the purge's scan, which then scans again (see
-- purge.lua).
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the dead letters' sorted set (ns:q:dead)
-- KEYS[4]  the dead letters' hash (ns:q:dead:Q)
-- KEYS[5..24]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[25], KEYS[26], KEYS[27]  the queue's keyed set, concurrency keys and
--          wake set (ns:q:keyed, ns:q:keys, ns:q:kwake)
-- KEYS[28]  the queue's unique keys (ns:q:unique, see unique.lua)
-- KEYS[29]  the queue's exact dues (ns:q:exact): a letter requeued due at the
--          ms its send's score rounded its exact due up to leaves them (see
--          rescore in lib.lua)
-- ARGV[1]  the first one's delay, ms
-- ARGV[2]  the time between two, µs
-- ARGV[3]  the queue's realtime channel (ns:rt:q)
-- ARGV[4]  the cutoff: the latest time of death (Unix ms) to requeue, or ""
-- ARGV[5..]  the ids
-- Returns -1 when the queue does not exist, -2 when Redis's clock has not
--         passed the cutoff yet, or a letter's death (nothing done: call
--         again), else how many were requeued
local attrs = redis.call("HMGET", KEYS[2], "vt", "totalsent", "redjob:prio", "redjob:keyed", "redjob:unique",
  "redjob:purging")
if not attrs[1] then return -1 end
local now = clock()
local cutoff = tonumber(ARGV[4])
if cutoff and now <= cutoff then return -2 end
local ids, seen = {}, {}
for i = 5, #ARGV do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    ids[#ids + 1] = ARGV[i]
  end
end
if #ids == 0 then return 0 end
local fields = {}
for _, id in ipairs(ids) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":p"
  fields[#fields + 1] = id .. ":k"
  fields[#fields + 1] = id .. ":u"
end
-- a letter that died in this very ms waits for the next (nothing done): its
-- job's next history entry must be of a later ms than its dead one, which its
-- "~<ms> <id>" in the history's list stands for only while it is the entry
-- (see history_ms in lib.lua)
-- (with a cutoff, the letters requeued died before it, so before now)
local died = many("ZMSCORE", KEYS[3], ids)
if not cutoff then
  for i = 1, #ids do
    if died[i] and tonumber(died[i]) >= now then return -2 end
  end
end
local dead = many("HMGET", KEYS[4], fields)
local queued = many("HMGET", KEYS[2], ids)
if cutoff then
  -- a letter that died after the cutoff counts as queued: left as it is
  for i = 1, #ids do
    if not died[i] or tonumber(died[i]) > cutoff then queued[i] = true end
  end
end
local first, step = tonumber(ARGV[1]), tonumber(ARGV[2])
-- the longest delay (MAX_DELAY, ms): a letter's due is at most that ahead,
-- as the memory backend's
local MOST = 9999999000
local mask = tonumber(attrs[3]) or 0
local z, h, gone, drop = {}, {}, {}, {}
local n = 0
local K
-- a running purge's mark, and whether a letter sent up to its cutoff was
-- requeued
local purging, moved = purge_mark(attrs[6], now), false
-- the unique keys this call took ("k:<key>" -> true), its entries, and the
-- back links of the stale entries they replace
local taken, u, stale = {}, {}, {}
-- whether unique key `key` is held by a queued job other than `id` (its entry
-- names a job in its level's set, with its body, within its lifetime), as
-- unique.lua reads it; a stale entry's holder's back link is dropped once the
-- key is taken, and a holder left in its set without a body (see unique.lua)
-- with it
local orphans = {}
local function held(key, id)
  if taken[key] then return true end
  local e = redis.call("HGET", KEYS[28], "k:" .. key)
  local hid, lv, ex = string.match(e or "", "^(%S+) (%S+) (%S+)$")
  lv, ex = tonumber(lv), tonumber(ex)
  if hid and hid ~= id and lv and lv >= -10 and lv <= 10 and ex and (ex == 0 or now < ex)
    and redis.call("ZSCORE", level_key(lv, 5), hid) then
    if redis.call("HEXISTS", KEYS[2], hid) == 1 then return true end
    orphans[#orphans + 1] = {level_key(lv, 5), hid}
  end
  if hid and hid ~= id then stale[#stale + 1] = "i:" .. hid end
  return false
end
for i, id in ipairs(ids) do
  local body = dead[4 * i - 3]
  local uex, ukey = string.match(dead[4 * i] or "", "^(%d+) (.+)$")
  -- a key whose lifetime ended while the job was dead is not taken again
  if ukey and tonumber(uex) ~= 0 and tonumber(uex) <= now then ukey = nil end
  if body and not queued[i] and not (ukey and held(ukey, id)) then
    local p = tonumber(dead[4 * i - 2]) or 0
    if p < -10 or p > 10 then p = 0 end
    local due = math.min(now + math.min(first + math.floor(n * step / 1000), MOST), LAST_DUE)
    local per, ck = string.match(dead[4 * i - 1] or "", "^(%d+) (.+)$")
    if ck then p = 0 end
    if ukey then
      taken[ukey] = true
      u[#u + 1] = "k:" .. ukey
      u[#u + 1] = id .. " " .. p .. " " .. uex
      u[#u + 1] = "i:" .. id
      u[#u + 1] = ukey
    end
    local key = level_key(p, 5)
    if ck then
      if not K then
        K = concurrency_keys(25, 26, 1, now, 27)
        K.mark = attrs[6]
        K.batch = true
      end
      local e = K.get(ck)
      if e.fresh then
        -- the first letter of a key without jobs sets its places
        e.fresh = false
        K.per(ck, math.max(1, math.min(tonumber(per), 1000)))
      end
      K.place(ck, string.format("%.0f", rescore(id, due, 29)), id)
    else
      local zl = z[key]
      if not zl then zl = {}; z[key] = zl end
      zl[#zl + 1] = string.format("%.0f", rescore(id, due, 29))
      zl[#zl + 1] = id
    end
    h[#h + 1] = id
    h[#h + 1] = body
    if p ~= 0 then mask = bit.bor(mask, bit.lshift(1, p + 10)) end
    if purging and string.sub(id, 1, 10) <= purging.cut then moved = true end
    gone[#gone + 1] = id
    for _, f in ipairs({id, id .. ":n", id .. ":err", id .. ":p", id .. ":a", id .. ":k", id .. ":u"}) do drop[#drop + 1] = f end
    n = n + 1
  end
end
if n == 0 then return 0 end
many("ZREM", KEYS[3], gone)
many("HDEL", KEYS[4], drop)
for key, zl in pairs(z) do many("ZADD", key, zl) end
if K then
  -- the bodies follow: a key filled here promotes none of this call's jobs
  K.save()
  if not attrs[4] then
    h[#h + 1] = "redjob:keyed"
    h[#h + 1] = "1"
  end
end
if #u > 0 then
  many("HSET", KEYS[28], u)
  if #stale > 0 then many("HDEL", KEYS[28], stale) end
  -- (not one of this call's letters, which may have been placed under its id)
  for _, o in ipairs(orphans) do
    if not seen[o[2]] then drop_orphans(o[1], {o[2]}) end
  end
  if not attrs[5] then
    h[#h + 1] = "redjob:unique"
    h[#h + 1] = "1"
  end
end
-- its jobs' dead entries stay in the history until they finish again, which
-- then overwrites them: complete.lua counts the elements so left behind (see
-- history_overwrites in lib.lua) once the queue has requeued any
h[#h + 1] = "redjob:requeued"
h[#h + 1] = "1"
h[#h + 1] = "totalsent"
h[#h + 1] = string.format("%.0f", (tonumber(attrs[2]) or 0) + n)
if mask ~= (tonumber(attrs[3]) or 0) then
  h[#h + 1] = "redjob:prio"
  h[#h + 1] = mask
end
many("HSET", KEYS[2], h)
if moved then
  -- read again: a keyed letter's wait may have counted one already
  local m = purge_mark(redis.call("HGET", KEYS[2], "redjob:purging"), now)
  if m then redis.call("HSET", KEYS[2], "redjob:purging", m.text(m.moves + 1)) end
end
redis.call("PUBLISH", ARGV[3], redis.call("ZCARD", KEYS[1]))
return n
