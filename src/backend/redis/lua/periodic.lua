-- Enqueues the job of one tick of a periodic schedule, at most once per tick
-- however many workers try: the schedule's last tick is kept in the queue's
-- periodic hash, and a tick not after it is not enqueued again.
-- KEYS[1]  the sorted set of the job's priority level (ns:q or ns:q:p<n>)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's periodic hash (ns:q:periodic): schedule name -> last tick,
--          "<name>:next" -> the tick after it (Unix ms)
-- ARGV[1]  the queue's realtime channel; ARGV[2] "1" to PUBLISH on every send
-- ARGV[3]  the body's length (checked against maxsize); ARGV[4] the priority
-- ARGV[5]  the schedule's name; ARGV[6] the tick (Unix ms)
-- ARGV[7]  "1": a catch-up of a missed tick, enqueued only when an earlier
--          tick of the schedule was recorded; "0": any tick
-- ARGV[8]  the job's id (its time prefix is the tick); ARGV[9] the body
-- ARGV[10] the schedule's next tick after this one ("" for none)
-- ARGV[11], ARGV[12]  a keyed job's concurrency key and per key, or none: it
--          enters its key as a send's (see send_keyed.lua)
-- KEYS[4], KEYS[5]  with a key: the queue's keyed set and concurrency keys
--          (ns:q:keyed, ns:q:keys)
-- A schedule paused ("<name>:paused" in KEYS[3], "<ms> <who>", see
-- schedule.lua) has its ticks recorded as done, and nothing enqueued.
-- Returns {1, now ms} enqueued; {0, now ms} already enqueued (or nothing to
--         catch up); {2, now ms} skipped, the schedule paused; {-1} no such
--         queue; {-2, len, maxsize} body too large; {-4, ms} the tick is that
--         far ahead of Redis's clock
local attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:prio",
  "redjob:keyed")
local refused, _, now = send_start(attrs)
if refused then return refused end
local tick = tonumber(ARGV[6])
if now < tick then return {-4, tick - now} end
local last = tonumber(redis.call("HGET", KEYS[3], ARGV[5]))
if (last and last >= tick) or (ARGV[7] == "1" and not last) then return {0, now} end
redis.call("HSET", KEYS[3], ARGV[5], ARGV[6])
if ARGV[10] == "" then
  redis.call("HDEL", KEYS[3], ARGV[5] .. ":next")
else
  redis.call("HSET", KEYS[3], ARGV[5] .. ":next", ARGV[10])
end
if redis.call("HEXISTS", KEYS[3], ARGV[5] .. ":paused") == 1 then return {2, now} end
if ARGV[11] then
  if not attrs[6] then redis.call("HSET", KEYS[2], "redjob:keyed", "1") end
  local K = concurrency_keys(4, 5, 1, now)
  K.batch = true
  K.per(ARGV[11], tonumber(ARGV[12]))
  K.place(ARGV[11], string.format("%.0f", now), ARGV[8])
  K.save()
  send_write(attrs, {}, {ARGV[8], ARGV[9]}, 1)
else
  send_write(attrs, {string.format("%.0f", now), ARGV[8]}, {ARGV[8], ARGV[9]}, 1)
end
return {1, now}
