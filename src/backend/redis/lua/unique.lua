-- Sends messages that are unique in their queue by a key, in order, all in one
-- call. The queue's hash ns:q:unique maps "k:<key>" to "<id> <priority> <expires
-- ms, 0: never>" of the job holding the key, and "i:<id>" back to the key. A key
-- is held while its job exists (waiting, scheduled, running or waiting for a
-- retry) and its lifetime has not run out; acks, dead letters, deletes and pops
-- free it (release_unique in lib.lua), and so does the start of a run of a job
-- enqueued unique until its run starts (unique_start.lua). An entry whose job
-- is gone (deleted by an RSMQ client, which knows nothing of it) is stale and
-- taken over here: its job is in no sorted set of its priority, or has no
-- body there (RSMQ's deleteMessage of a job at a priority other than 0
-- removes the body alone, and its deleteQueue the queue's hash; the member
-- left is dropped here, as a fetch drops an orphan).
-- A message whose key is held is a duplicate, handled by its policy:
--   "k" keep: nothing changes;
--   "d" replace delay: the held job's due time becomes the new message's;
--   "r" replace: its due time, body and priority become the new message's.
-- Only a job that was never delivered is changed (its score is whole ms, as a
-- fetch writes a count in the thousandths, and it has no "<id>:rc" field, which
-- an RSMQ-style receive writes): a running job, or one waiting for a retry, is
-- kept as it is.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique)
-- KEYS[4..23]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>);
--          or KEYS[4] alone: the sorted set of the messages' priority, enough
--          while every held key's job is at that priority or 0 (else {-3})
-- KEYS[24], or KEYS[5] with KEYS[4] alone  the queue's exact dues (ns:q:exact,
--          see index_exact in lib.lua): new messages whose ids mark a delay
-- ARGV[1..4]  as send.lua: realtime channel, "1" to always PUBLISH, the largest
--          body length, the messages' priority
-- ARGV[5..] six values per message: id suffix, when (as send.lua), body, unique
--           key, policy ("k", "d" or "r"), the key's lifetime in ms ("0": until
--           the job leaves the queue)
-- Returns {1, id prefix, outcome, id, outcome, id, ...}: per message 0 added (its
--         id is the prefix and its suffix; "" is returned), 1 duplicate kept, 2 due
--         time moved, 3 replaced, each with the held job's id; {-1} when the queue
--         does not exist; {-2, maxlen, maxsize} when a body exceeds maxsize;
--         {-3} when a key is held by a job at a priority whose sorted set was
--         not passed (nothing written: call again with every level)
local attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:prio", "redjob:unique",
  "redjob:leased", "redjob:exact")
local refused, qdelay, now, us, prefix = send_start(attrs)
if refused then return refused end
local p = tonumber(ARGV[4])
local full = #KEYS >= 24
local exact = full and 24 or 5
-- the sorted set of priority lv, if passed
local function lkey(lv)
  if lv == 0 then return KEYS[1] end
  if full then return level_key(lv, 4) end
  if lv == p then return KEYS[4] end
  return nil
end
-- "k:<key>" entries read or written by this call (false: none)
local entries = {}
-- an entry as {id, priority} when it is held at `now` by its ttl
local function parse(entry)
  if not entry then return nil end
  local id, lv, ex = string.match(entry, "^(%S+) (%S+) (%S+)$")
  lv, ex = tonumber(lv), tonumber(ex)
  if id and lv and lv >= -10 and lv <= 10 and ex and (ex == 0 or now < ex) then
    return {id, lv}
  end
  return {id}
end
if not full then
  for b = 5, #ARGV, 6 do
    local kf = "k:" .. ARGV[b + 3]
    local entry = redis.call("HGET", KEYS[3], kf)
    entries[kf] = entry or false
    local e = parse(entry)
    if e and e[2] and not lkey(e[2]) then return {-3} end
  end
end
local mask = tonumber(attrs[5]) or 0
local newmask = mask
local out = {1, prefix}
local added, changed = 0, 0
-- bodies and the queue's own fields, written by one HSET at the end (a later
-- replace of the same job in this call comes later in the list, and wins)
local hargs = {}
-- back links of stale entries, deleted last: the first write of a call must be
-- one that may grow memory, so that Redis at maxmemory refuses the whole call;
-- and their jobs left without a body, {sorted set, id}, dropped last too
local stale, orphans = {}, {}
-- the ids this call added: their bodies are in hargs until the end
local sent = {}
for b = 5, #ARGV, 6 do
  local score = due_score(ARGV[b + 1], now, us, qdelay)
  local key, policy, ttl = ARGV[b + 3], ARGV[b + 4], tonumber(ARGV[b + 5])
  local expires = ttl > 0 and string.format("%.0f", now + ttl) or "0"
  local kf = "k:" .. key
  -- the job holding the key, if it still exists (with its body) and the key
  -- has not expired
  local held, level, current
  local entry = entries[kf]
  if entry == nil then entry = redis.call("HGET", KEYS[3], kf) end
  local e = parse(entry)
  if e then
    if e[2] then
      current = redis.call("ZSCORE", lkey(e[2]), e[1])
      if current and (sent[e[1]] or redis.call("HEXISTS", KEYS[2], e[1]) == 1) then
        held, level = e[1], e[2]
      elseif current then
        orphans[#orphans + 1] = {lkey(e[2]), e[1]}
      end
    end
    if not held and e[1] then stale[#stale + 1] = "i:" .. e[1] end
  end
  if held then
    local outcome = 1
    local s = tonumber(current)
    -- never delivered: whole ms, and not received by an RSMQ-style receive
    if policy ~= "k" and s == math.floor(s) and redis.call("HEXISTS", KEYS[2], held .. ":rc") == 0 then
      if policy == "r" then
        hargs[#hargs + 1] = held
        hargs[#hargs + 1] = ARGV[b + 2]
        outcome = 3
      else
        outcome = 2
      end
      local from = level
      if outcome == 3 then level = p end
      redis.call("ZADD", lkey(level), string.format("%.0f", tonumber(score)), held)
      -- the held id's own exact due must not stand for the new one (rescore;
      -- after the ZADD, which may grow memory: see above)
      rescore(held, tonumber(score), exact)
      if level ~= from then
        -- after the ZADD: a write that may grow memory comes first (maxmemory)
        redis.call("ZREM", lkey(from), held)
        if p ~= 0 then newmask = bit.bor(newmask, bit.lshift(1, p + 10)) end
      end
      entries[kf] = held .. " " .. level .. " " .. expires
      redis.call("HSET", KEYS[3], kf, entries[kf])
      changed = changed + 1
    end
    out[#out + 1] = outcome
    out[#out + 1] = held
  else
    local id = prefix .. ARGV[b]
    sent[id] = true
    redis.call("ZADD", lkey(p), score, id)
    -- served: a redjob worker fetched from the queue (see send.lua)
    index_exact(exact, {score, id}, worker_fetched(attrs[4]) or attrs[7], attrs[8])
    attrs[8] = attrs[8] or "1"
    hargs[#hargs + 1] = id
    hargs[#hargs + 1] = ARGV[b + 2]
    entries[kf] = id .. " " .. p .. " " .. expires
    redis.call("HSET", KEYS[3], kf, entries[kf], "i:" .. id, key)
    added = added + 1
    out[#out + 1] = 0
    out[#out + 1] = ""
  end
end
if added > 0 then
  hargs[#hargs + 1] = "totalsent"
  hargs[#hargs + 1] = string.format("%.0f", (tonumber(attrs[3]) or 0) + added)
  if p ~= 0 then newmask = bit.bor(newmask, bit.lshift(1, p + 10)) end
end
if newmask ~= mask then
  hargs[#hargs + 1] = "redjob:prio"
  hargs[#hargs + 1] = newmask
end
if attrs[6] ~= "1" then
  hargs[#hargs + 1] = "redjob:unique"
  hargs[#hargs + 1] = "1"
end
local waiting = may_wait(attrs[4])
local wake = added + changed > 0 and (ARGV[2] == "1" or waiting)
if wake and waiting then
  hargs[#hargs + 1] = "redjob:waiting"
  hargs[#hargs + 1] = woken(attrs[4])
end
if #hargs > 0 then many("HSET", KEYS[2], hargs) end
if #stale > 0 then many("HDEL", KEYS[3], stale) end
for _, o in ipairs(orphans) do drop_orphans(o[1], {o[2]}) end
if wake then
  -- the size of the messages' priority's set, as send.lua publishes
  redis.call("PUBLISH", ARGV[1], redis.call("ZCARD", lkey(p)))
end
return out
