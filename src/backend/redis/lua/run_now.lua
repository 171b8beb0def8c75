-- Makes a scheduled job due now (at any priority), keeping its delivery count,
-- and wakes the queue's waiting workers. A job already due is left as it is; a
-- running one too (its lease decides), and so is a message an RSMQ-style receive
-- hid (its visibility timeout decides). A keyed job waiting for its key's place
-- is made due now within the key's wait, where the key's jobs go by due time: it
-- enters its key again as a send does (see K.place in lib.lua).
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..22]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[23], KEYS[24]  the queue's keyed set and concurrency keys (ns:q:keyed,
--          ns:q:keys, see concurrency_keys in lib.lua)
-- ARGV[1]  the id
-- ARGV[2]  the queue's realtime channel (ns:rt:q)
-- Returns -1 when the queue does not exist, 0 when the job is not in it, 1 when
--         it was scheduled (now due), 2 when it was due already, 3 when it runs,
--         4 when it waited for its key's place due later (now due, it takes a
--         place or waits on), 5 when it waits for its key's place due already
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio", "redjob:waiting", "redjob:keyed", "redjob:purging")
if not attrs[1] then return -1 end
local now = clock()
local id = ARGV[1]
local level, s = find_level(tonumber(attrs[2]) or 0, 3, id)
if not level then
  -- a keyed job waits in the keyed set as "<key>\0<19 digits><id>", its hash
  -- field "<id>:k" being "<19 digits><key>" (a holder is in a sorted set)
  local at = attrs[4] and redis.call("HGET", KEYS[2], id .. ":k")
  if not at then return 0 end
  local key, d = string.sub(at, 20), string.sub(at, 1, 19)
  local member = key .. "\0" .. d .. id
  if not redis.call("ZSCORE", KEYS[23], member) then return 0 end
  if tonumber(string.sub(d, 1, 16)) < now + 1 then return 5 end
  redis.call("ZREM", KEYS[23], member)
  local K = concurrency_keys(23, 24, 1, now)
  K.mark = attrs[5]
  -- due in this ms with its delivery count (the digits' last three)
  K.place(key, string.format("%.0f.%s", now, string.sub(d, 17, 19)), id)
  K.save()
  if attrs[3] == "1" then
    redis.call("HSET", KEYS[2], "redjob:waiting", "0")
    redis.call("PUBLISH", ARGV[2], redis.call("ZCARD", KEYS[1]))
  end
  return 4
end
local score = tonumber(s)
if score < now + 1 then return 2 end
-- a lease an earlier redjob wrote (see LEGACY in lib.lua): due once it ran out
if now < LEGACY and score >= LEGACY then
  if score - LEGACY < now + 1 then return 2 end
  return 3
end
if select(2, score_count(score)) then return 3 end
local count = score_count(score)
-- hidden by an RSMQ-style receive (a whole-ms score, a receive counted): its
-- receiver works on it, as a worker on a lease
if count == 0 and (tonumber(redis.call("HGET", KEYS[2], id .. ":rc")) or 0) > 0 then
  return 3
end
-- due in this ms (a fetch takes every score of the ms, see due_max)
redis.call("ZADD", level[2], string.format("%.0f.%03d", now, count), id)
if attrs[3] == "1" then
  redis.call("HSET", KEYS[2], "redjob:waiting", "0")
  redis.call("PUBLISH", ARGV[2], redis.call("ZCARD", KEYS[1]))
end
return 1
