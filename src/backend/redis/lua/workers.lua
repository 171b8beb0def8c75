-- The live-worker registry: a worker's beat, its leave, or a listing. Entries
-- that ran out are returned by beats and leaves (up to 100 per call) with
-- the queues their last beats named, whose hashes may hold the notes of what
-- sends handed those workers (see reclaim.lua): the caller drops the notes,
-- then the entries ("drop"), so that a caller cut off in between leaves them
-- for the next. The keys expire five minutes after the last live entry, so a
-- registry nobody beats any more leaves nothing behind. Between beats a worker
-- whose beat did not change only moves its entry's end on (ZADD XX INCR by the
-- time since, see Rsmq::touch), beating in full at least every two minutes,
-- which the five minutes cover.
-- KEYS[1]  ns:{@workers}: sorted set of worker ids by when they run out (Unix ms)
-- KEYS[2]  ns:{@workers}:info: hash of worker id -> its last beat (JSON, with
--          "at_ms", when it was written, put first here)
-- KEYS[3]  ns:{@workers}:serves: hash of digest -> what the workers of one
--          build serve (JSON: job types, subscribers, schedules), which beats name
-- KEYS[4]  ns:{@workers}:control: hash of worker id -> the control an operator
--          set on it, "<quiet|stop> <ms> <who>" (dropped with its entry)
-- KEYS[5]  ns:{@workers}:settings: hash whose field "v" is the version of the
--          queues' settings, which every change of them increments (see
--          Rsmq::set_settings); a beat returns it
-- ARGV[1]  "beat", "leave", "serve", "control", "drop" or "list"
-- ARGV[2]  the worker's id (beat, leave, control); ARGV[3] its ttl in ms; ARGV[4]
--          its beat. For "serve", the digest in ARGV[2] and its JSON in
--          ARGV[3]. For "control", the control in ARGV[3] ("quiet", "stop",
--          or "" to clear it), who sets it in ARGV[4], and the worker's
--          hand-off channel in ARGV[5], on which it is woken to read it. For
--          "drop", the ids of entries that ran out from ARGV[2] on (those
--          still run out are dropped)
-- Returns  beat: {now, the worker's control or "", the settings' version or
--          "", then (id, queues) x each entry that ran out, queues as its last
--          beat's JSON writes them, '"a","b"' (or "")}; leave: {now, then the
--          same}; serve, drop: now
--          (Unix ms); control: 1, 0 when no live worker has that id (nothing
--          stored), 2 when it is stopping (a stop is final: kept); list: {now, n, then n x (id, runs out at, beat,
--          control or ""), then (digest, JSON) x each entry of KEYS[3] a listed
--          beat names}
local now = clock()
local controlled = 0
if ARGV[1] == "control" then
  local ends = redis.call("ZSCORE", KEYS[1], ARGV[2])
  if ends and tonumber(ends) > now then
    controlled = 1
    -- a stop is final: a later quiet or resume leaves it
    local was = redis.call("HGET", KEYS[4], ARGV[2])
    if was and string.sub(was, 1, 5) == "stop " then
      controlled = 2
    elseif ARGV[3] == "" then
      redis.call("HDEL", KEYS[4], ARGV[2])
    else
      redis.call("HSET", KEYS[4], ARGV[2], string.format("%s %.0f %s", ARGV[3], now, ARGV[4]))
    end
    redis.call("PUBLISH", ARGV[5], "! control")
  end
end
if ARGV[1] == "serve" then
  -- bounded: past 64 builds' entries (rolling deploys leave old ones), start
  -- afresh; the live workers serve theirs again within two minutes
  if redis.call("HEXISTS", KEYS[3], ARGV[2]) == 0 and redis.call("HLEN", KEYS[3]) >= 64 then
    redis.call("DEL", KEYS[3])
  end
  redis.call("HSET", KEYS[3], ARGV[2], ARGV[3])
elseif ARGV[1] == "beat" then
  redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  local beat = ARGV[4]
  if string.sub(beat, 1, 1) == "{" then
    beat = string.format('{"at_ms":%.0f,', now) .. string.sub(beat, 2)
  end
  redis.call("HSET", KEYS[2], ARGV[2], beat)
elseif ARGV[1] == "leave" then
  redis.call("ZREM", KEYS[1], ARGV[2])
  redis.call("HDEL", KEYS[2], ARGV[2])
  redis.call("HDEL", KEYS[4], ARGV[2])
end
-- the entries that ran out, for a worker's beat or leave to drop (a listing
-- skips them): each with the queues its last beat named (names of letters,
-- digits, "_" and "-", so the array's text ends at the first "]")
local gone = {}
if ARGV[1] == "beat" or ARGV[1] == "leave" then
  local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, 100)
  if #ids > 0 then
    local beats = redis.call("HMGET", KEYS[2], unpack(ids))
    for i = 1, #ids do
      local queues = beats[i] and string.match(beats[i], '"queues":%[([^%]]*)%]')
      gone[2 * i - 1], gone[2 * i] = ids[i], queues or ""
    end
  end
elseif ARGV[1] == "drop" then
  local ids = {}
  for i = 2, #ARGV do
    local ends = redis.call("ZSCORE", KEYS[1], ARGV[i])
    if ends and tonumber(ends) <= now then ids[#ids + 1] = ARGV[i] end
  end
  if #ids > 0 then
    redis.call("ZREM", KEYS[1], unpack(ids))
    redis.call("HDEL", KEYS[2], unpack(ids))
    redis.call("HDEL", KEYS[4], unpack(ids))
  end
end
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
if #last == 0 then
  redis.call("DEL", KEYS[1], KEYS[2], KEYS[4])
  -- what workers serve outlives them by five minutes too: a worker serves
  -- before its first beat, and a listing or a leave meanwhile keeps it
  redis.call("PEXPIRE", KEYS[3], 300000)
elseif tonumber(last[2]) > now then
  -- from the last live entry only: entries that ran out, which nobody drops
  -- once no worker beats, go with the keys five minutes after it
  local ttl = tonumber(last[2]) - now + 300000
  redis.call("PEXPIRE", KEYS[1], ttl)
  redis.call("PEXPIRE", KEYS[2], ttl)
  redis.call("PEXPIRE", KEYS[3], ttl)
  redis.call("PEXPIRE", KEYS[4], ttl)
end
if ARGV[1] == "beat" then
  return {now, redis.call("HGET", KEYS[4], ARGV[2]) or "", redis.call("HGET", KEYS[5], "v") or "",
    unpack(gone)}
end
if ARGV[1] == "leave" then return {now, unpack(gone)} end
if ARGV[1] == "control" then return controlled end
if ARGV[1] ~= "list" then return now end
local out = {now, 0}
local rows = redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. now, "+inf", "WITHSCORES")
for i = 1, #rows, 2 do
  local beat = redis.call("HGET", KEYS[2], rows[i])
  if beat then
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
    out[#out + 1] = beat
    out[#out + 1] = redis.call("HGET", KEYS[4], rows[i]) or ""
    out[2] = out[2] + 1
  end
end
-- what the listed workers serve, each entry once (a beat names it by digest)
local seen = {}
for i = 5, #out, 4 do
  local digest = string.match(out[i], '"serves":"([^"]+)"')
  if digest and not seen[digest] then
    seen[digest] = true
    local json = redis.call("HGET", KEYS[3], digest)
    if json then
      out[#out + 1] = digest
      out[#out + 1] = json
    end
  end
end
return out
