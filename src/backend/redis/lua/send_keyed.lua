-- Sends messages with concurrency keys to one queue, all or nothing (see
-- concurrency_keys in lib.lua): a message whose key has a free place (fewer
-- holders than its per key) takes it and goes to the queue's sorted set like
-- any message; the others wait in the queue's keyed set, ordered by due time
-- within their key, until a place frees (see complete.lua). A message due
-- before a holder that is not running (delayed, or waiting for a retry) takes
-- that holder's place, which waits again: within a key, jobs start in order of
-- due time. Keyed messages run at priority 0 and are never handed off (a
-- waiting worker is woken instead). The send's per key becomes the key's.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's keyed set (ns:q:keyed)
-- KEYS[4]  the queue's keys (ns:q:keys)
-- ARGV[1]  the queue's realtime channel (ns:rt:q)
-- ARGV[2]  "1": PUBLISH the queue's length on every send, as RSMQ's `realtime`;
--          "0": only when a redjob worker waits for work
-- ARGV[3]  the largest body length (bytes) of the whole batch, checked against maxsize
-- ARGV[4]  "0": the priority
-- ARGV[5..] five values per message: id suffix (as send.lua's), when (as
--           send.lua's), body, key, per key
-- Returns {1, id prefix} on success; {-1} when the queue does not exist;
--         {-2, maxlen, maxsize} when a body exceeds the queue's maxsize
local attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:prio",
  "redjob:keyed", "redjob:purging")
local refused, qdelay, now, us, prefix = send_start(attrs)
if refused then return refused end
-- the first write may grow memory: at maxmemory the send is refused before
-- it wrote anything else
redis.call("HSET", KEYS[2], "redjob:keyed", "1")
local n = (#ARGV - 4) / 5
local K = concurrency_keys(3, 4, 1, now)
K.mark = attrs[7]
K.batch = true
-- the keys' holders, read before the jobs are written: under an ACL rule
-- that refuses the reads, the send fails having written none of them
for i = 1, n do K.get(ARGV[(i - 1) * 5 + 8]) end
local hargs = {}
local scores = {}
for i = 1, n do
  local b = (i - 1) * 5 + 5
  local id = prefix .. ARGV[b]
  local when, key = ARGV[b + 1], ARGV[b + 3]
  local score = scores[when]
  if not score then
    score = due_score(when, now, us, qdelay)
    scores[when] = score
  end
  K.per(key, tonumber(ARGV[b + 4]))
  K.place(key, score, id)
  hargs[#hargs + 1] = id
  hargs[#hargs + 1] = ARGV[b + 2]
end
K.save()
send_write(attrs, {}, hargs, n, false)
return {1, prefix}
