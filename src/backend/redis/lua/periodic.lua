-- Enqueues the jobs of ticks of periodic schedules of one queue, each at most
-- once per tick however many workers try: a schedule's last tick is kept in
-- the queue's periodic hash, and a tick not after it is not enqueued again. A
-- worker sends the ticks of its schedules due together in one call (at most
-- 100: the call's work is that of its ticks), so that a fleet of workers with
-- many schedules makes a call per worker, not per schedule, at each instant.
-- KEYS[1]  the sorted set of the jobs' priority level (ns:q or ns:q:p<n>)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's periodic hash (ns:q:periodic): schedule name -> last tick,
--          "<name>:next" -> the tick after it (Unix ms)
-- ARGV[1]  the queue's realtime channel; ARGV[2] "1" to PUBLISH on every send
-- ARGV[3]  "0" (each body's length is checked against maxsize here); ARGV[4]
--          the jobs' priority
-- ARGV[5]  how many ticks (n), then six values for each:
--          the schedule's name; the tick (Unix ms); "1": a catch-up of a missed
--          tick, enqueued only when an earlier tick of the schedule was
--          recorded, "0": any tick; the job's id (its time prefix is the
--          tick); the body; the schedule's next tick after this one ("" for
--          none)
-- ARGV[6 + 6n], ARGV[7 + 6n]  with n = 1 only: a keyed job's concurrency key
--          and per key: it enters its key as a send's (see send_keyed.lua)
-- KEYS[4], KEYS[5]  with a key: the queue's keyed set and concurrency keys
--          (ns:q:keyed, ns:q:keys)
-- A schedule paused ("<name>:paused" in KEYS[3], "<ms> <who>", see
-- schedule.lua) has its ticks recorded as done, and nothing enqueued. While a
-- purge runs (the hash field "redjob:purging", see purge_mark in lib.lua), a
-- call that enqueues a tick up to its cutoff counts one move in it: the job
-- may go behind the purge's scan, which then scans again (see purge.lua).
-- Returns {-1} no such queue; else {1, now ms, then three values a tick:
--         1, 0, 0 enqueued; 0, 0, 0 already enqueued (or nothing to catch
--         up); 2, 0, 0 skipped, the schedule paused; -2, len, maxsize the
--         body too large (nothing recorded); -4, ms, 0 the tick is that far
--         ahead of Redis's clock}
local attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:prio",
  "redjob:keyed", "redjob:purging")
local refused, _, now = send_start(attrs)
if refused then return refused end
local maxsize = queue_maxsize(attrs[2])
local n = tonumber(ARGV[5])
if not n or n < 1 or n ~= math.floor(n) or #ARGV < 5 + 6 * n or (#ARGV > 5 + 6 * n and n ~= 1) then
  error("ERR periodic: expected ticks, and a key with one tick only")
end
local names = {}
for i = 1, n do names[i] = ARGV[6 * i] end
local lasts = redis.call("HMGET", KEYS[3], unpack(names))
-- the ticks recorded by this call, by name (a schedule twice in one call)
local seen = {}
local out = {1, now}
local score = string.format("%.0f", now)
local zargs, hargs, sent = {}, {}, 0
for i = 1, n do
  local b = 6 * i
  local name, tick, body = ARGV[b], tonumber(ARGV[b + 1]), ARGV[b + 4]
  local last = seen[name] or tonumber(lasts[i])
  local code, x, y = 0, 0, 0
  if now < tick then
    code, x = -4, tick - now
  elseif maxsize ~= -1 and #body > maxsize then
    code, x, y = -2, #body, maxsize
  elseif not ((last and last >= tick) or (ARGV[b + 2] == "1" and not last)) then
    seen[name] = tick
    redis.call("HSET", KEYS[3], name, ARGV[b + 1])
    if ARGV[b + 5] == "" then
      redis.call("HDEL", KEYS[3], name .. ":next")
    else
      redis.call("HSET", KEYS[3], name .. ":next", ARGV[b + 5])
    end
    if redis.call("HEXISTS", KEYS[3], name .. ":paused") == 1 then
      code = 2
    else
      code = 1
      sent = sent + 1
      zargs[2 * sent - 1] = score
      zargs[2 * sent] = ARGV[b + 3]
      hargs[2 * sent - 1] = ARGV[b + 3]
      hargs[2 * sent] = body
    end
  end
  out[#out + 1] = code
  out[#out + 1] = x
  out[#out + 1] = y
end
if sent == 0 then return out end
-- a job's id carries its tick, maybe up to a running purge's cutoff: counted
-- in the purge's mark (once a call), so that a pass that scanned its set
-- scans again (see purge.lua)
local m = purge_mark(attrs[7], now)
if m then
  for i = 2, #zargs, 2 do
    if string.sub(zargs[i], 1, 10) <= m.cut then
      redis.call("HSET", KEYS[2], "redjob:purging", m.text(m.moves + 1))
      -- counted: a keyed tick's wait counts no more
      attrs[7] = false
      break
    end
  end
end
local key = ARGV[6 + 6 * n]
if key then
  if not attrs[6] then redis.call("HSET", KEYS[2], "redjob:keyed", "1") end
  local K = concurrency_keys(4, 5, 1, now)
  K.mark = attrs[7]
  K.batch = true
  K.per(key, tonumber(ARGV[7 + 6 * n]))
  K.place(key, score, ARGV[9])
  K.save()
  send_write(attrs, {}, hargs, 1)
else
  send_write(attrs, zargs, hargs, sent)
end
return out
