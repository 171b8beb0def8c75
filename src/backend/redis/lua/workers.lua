-- The live-worker registry: a worker's beat, its leave, or a listing. Entries
-- that ran out are dropped (up to 100 per call), and both keys expire five
-- minutes after the last entry, so a registry nobody beats any more leaves
-- nothing behind. Between beats a worker whose beat did not change only moves
-- its entry's end on (a ZINCRBY by the time since, see Rsmq::touch), at least
-- once every two minutes beating in full, which the five minutes cover.
-- KEYS[1]  ns:{@workers}: sorted set of worker ids by when they run out (Unix ms)
-- KEYS[2]  ns:{@workers}:info: hash of worker id -> its last beat (JSON), and
--          "<id>:at" -> when it was written (Unix ms)
-- ARGV[1]  "beat", "leave" or "list"
-- ARGV[2]  the worker's id (beat, leave); ARGV[3] its ttl in ms; ARGV[4] its beat
-- Returns  beat, leave: now (Unix ms); list: {now, id, runs out at, beat,
--          written at, ...}
local now = clock()
if ARGV[1] == "beat" then
  redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call("HSET", KEYS[2], ARGV[2], ARGV[4], ARGV[2] .. ":at", string.format("%.0f", now))
elseif ARGV[1] == "leave" then
  redis.call("ZREM", KEYS[1], ARGV[2])
  redis.call("HDEL", KEYS[2], ARGV[2], ARGV[2] .. ":at")
end
local gone = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, 100)
if #gone > 0 then
  local fields = {}
  for _, id in ipairs(gone) do
    fields[#fields + 1] = id
    fields[#fields + 1] = id .. ":at"
  end
  redis.call("ZREM", KEYS[1], unpack(gone))
  redis.call("HDEL", KEYS[2], unpack(fields))
end
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
if #last == 0 then
  redis.call("DEL", KEYS[1], KEYS[2])
else
  local ttl = math.max(1, tonumber(last[2]) - now) + 300000
  redis.call("PEXPIRE", KEYS[1], ttl)
  redis.call("PEXPIRE", KEYS[2], ttl)
end
if ARGV[1] ~= "list" then return now end
local out = {now}
local rows = redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. now, "+inf", "WITHSCORES")
for i = 1, #rows, 2 do
  local beat = redis.call("HMGET", KEYS[2], rows[i], rows[i] .. ":at")
  if beat[1] then
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
    out[#out + 1] = beat[1]
    out[#out + 1] = beat[2] or ""
  end
end
return out
