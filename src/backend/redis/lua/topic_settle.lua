-- Settles a consumer's finished events: acknowledges the handled ones, sets the
-- failed ones' idle time so that a claim takes them again when their backoff is
-- over, and moves the given-up ones to the subscriber's dead letters.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2]  the subscriber's dead letters (ns:t:{topic}:dead:<subscriber>)
-- ARGV[1]  the subscriber, ARGV[2] this consumer
-- ARGV[3]  the most dead letters to keep ("" for no limit)
-- ARGV[4]  n, then n ids to acknowledge
-- then     m, then m triples: id, idle time to set (ms), delivery count to
--          set ("" to keep it: a release of an event that did not run sets it back)
-- then     k, then k 5-tuples: id, type, data, error, deliveries
-- Returns {acknowledged, retries set, dead-lettered}
local key, dead, group, me = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local keep = tonumber(ARGV[3])
local i = 4
local n = tonumber(ARGV[i])
local acks = {}
for j = i + 1, i + n do acks[#acks + 1] = ARGV[j] end
i = i + n + 1
local acked = 0
if #acks > 0 then
  for c = 1, #acks, 4000 do
    acked = acked + redis.call("XACK", key, group, unpack(acks, c, math.min(c + 3999, #acks)))
  end
end
local m = tonumber(ARGV[i])
local retried = 0
for j = i + 1, i + 3 * m, 3 do
  local p = redis.pcall("XPENDING", key, group, ARGV[j], ARGV[j], 1)
  if not p.err and p[1] and p[1][2] == me then
    if ARGV[j + 2] == "" then
      redis.call("XCLAIM", key, group, me, 0, ARGV[j], "IDLE", ARGV[j + 1], "JUSTID")
    else
      redis.call("XCLAIM", key, group, me, 0, ARGV[j], "IDLE", ARGV[j + 1],
        "RETRYCOUNT", ARGV[j + 2], "JUSTID")
    end
    retried = retried + 1
  end
end
i = i + 3 * m + 1
local k = tonumber(ARGV[i])
local buried = 0
for j = i + 1, i + 5 * k, 5 do
  local p = redis.pcall("XPENDING", key, group, ARGV[j], ARGV[j], 1)
  if not p.err and p[1] then
    if keep then
      redis.call("XADD", dead, "MAXLEN", "~", keep, "*", "id", ARGV[j], "type", ARGV[j + 1],
        "data", ARGV[j + 2], "error", ARGV[j + 3], "deliveries", ARGV[j + 4])
    else
      redis.call("XADD", dead, "*", "id", ARGV[j], "type", ARGV[j + 1],
        "data", ARGV[j + 2], "error", ARGV[j + 3], "deliveries", ARGV[j + 4])
    end
    redis.call("XACK", key, group, ARGV[j])
    buried = buried + 1
  end
end
return {acked, retried, buried}
