-- Sends messages to one queue in RSMQ's layout, all or nothing. Four commands for
-- any number of messages when no worker waits: HMGET, TIME, ZADD, HSET (totalsent
-- is written by the HSET from the HMGET's value, which the script's atomicity
-- makes safe); a PUBLISH more to wake a waiting worker, or a hand-off's (below).
-- KEYS[1]  the sorted set of the messages' priority level (ns:q for 0, else ns:q:p<n>)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's lease counts (ns:q:leases): a hand-off's lease is counted
-- KEYS[4]  the queue's exact dues (ns:q:exact): messages whose ids mark a delay
--          (see index_exact in lib.lua)
-- ARGV[1]  the queue's realtime channel (ns:rt:q)
-- ARGV[2]  "1": PUBLISH the queue's length on every send, as RSMQ's `realtime`;
--          "0": only when a redjob worker waits for work (its fetch set the hash
--          field "redjob:waiting"), which the send clears
-- ARGV[3]  the largest body length (bytes) of the whole batch, checked against maxsize
-- ARGV[4]  the messages' priority, -10..10; any but 0 sets its bit (priority + 10)
--          in the hash field "redjob:prio", which tells fetches which levels to read
-- ARGV[5..] three values per message: id suffix (22 chars, ascending within the
--           call so the batch's ids sort in send order, or, with KEYS[5], a
--           whole id of 32 chosen beforehand), when ("" = the queue's
--           delay, "d<ms>" = visible after ms, "a<ms>" = visible at Unix ms), body
-- KEYS[5]  optional: the queue's once marks (ns:q:once, a sorted set of marks
--          scored by when they were made): the last ARGV is then a mark, and the
--          call sends nothing when the mark is there already (a batch's
--          callback sent again after a crash, see batches.rs); otherwise it
--          enters the mark with the messages, and drops up to 10 marks older
--          than 7 days; a whole id sent (a flow's parent) sent up to a
--          running purge's cutoff counts in its mark (the hash field
--          "redjob:purging", see purge_mark in lib.lua)
-- The hash field "redjob:handoff" names a worker waiting for the queue (its
-- fetch set it): the first message, when due at once, is handed to it (see
-- hand_off in lib.lua, four commands more: HMGET of the queue's flags, which
-- the lone call below reads with its first, PUBSUB NUMSUB, PUBLISH, and the
-- lease count's HINCRBY; on a producer ACL rule without +hincrby, the
-- refused HINCRBY, then HGET and HSET) rather than waking it to fetch.
-- Returns {1, id prefix (10 chars of Redis microseconds), waited} on success:
--         each id is the prefix and its suffix; `waited` is 1 when a redjob
--         worker waited for the queue (registered for a hand-off, or to be
--         woken), else 0; {0} when the once mark was there already; {-3}
--         when a flow's parent (a whole id) no longer waits though its mark
--         is not there (its queue was deleted since, maybe created again:
--         flow_fail.lua and a caller's cancel enter a mark); {-1} when
--         the queue does not exist; {-2, maxlen, maxsize} when a body exceeds
--         the queue's maxsize (nothing sent)
-- The lone call: one message at priority 0, not delayed (no "d<ms>": a
-- delay's id marks it for the exact dues), the client's common send.
-- KEYS[1]  the queue's sorted set (ns:q), KEYS[2] its hash (ns:q:Q)
-- KEYS[3]  optional: the queue's lease counts (ns:q:leases), passed unless
--          the client's last send to the queue found no worker waiting: the
--          message is then handed to a waiting worker (see hand_off in
--          lib.lua), whose flags the first HMGET reads with the queue's
--          attributes; without it, a worker that waits is woken instead (the
--          hand-off's lease count needs the key), a stale registration is
--          left to the next call with KEYS[3], and the first HMGET reads only
--          what a send needs
-- ARGV[1]  the realtime channel, ARGV[2] the id suffix, ARGV[3] when ("" or
--          "a<ms>"), ARGV[4] the body; ARGV[5] optional: "1" PUBLISHes the
--          queue's length on every send (RSMQ's `realtime`)
-- It writes what the general call below writes for one such message (the
-- body's length read rather than passed), with fewer keys and arguments
-- (each costs Redis about 1.4k instructions) and without the tables a batch
-- builds (BENCHMARKS.md, Speed II parts 13, 21 and 22). Returns as the
-- general call does.
if not KEYS[4] then
  local hand = KEYS[3]
  local attrs
  if hand then
    -- "redjob:paused" in the 5th place, which the general call gives the
    -- priority mask; hand_off reads the flags from it on
    attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:paused",
      "redjob:handoff", "totalrecv", "redjob:leased", "redjob:concurrency", "redjob:rate", "redjob:throttled",
      "redjob:handoffs")
  else
    attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:handoff")
  end
  if not attrs[1] then return {-1} end
  local body = ARGV[4]
  local maxsize = queue_maxsize(attrs[2])
  if maxsize ~= -1 and #body > maxsize then return {-2, #body, maxsize} end
  if string.byte(ARGV[3], 1) == 100 then error("ERR a delayed message needs the general send") end
  local now, us, time = clock()
  -- (a queue's delay is mostly "0": no number to parse)
  local qdelay = attrs[1] == "0" and 0 or (tonumber(attrs[1]) or not_a_delay()) * 1000
  -- due at once: its score is `now`, passed as a number (an integral one is
  -- written as an integer, as the count below), without due_score's
  -- string.format (which also cuts a score below the legacy leases', from
  -- 2096 on)
  local score, due = now, now
  if ARGV[3] ~= "" or qdelay ~= 0 or now > LAST_DUE then score, due = due_score(ARGV[3], now, us, qdelay) end
  local prefix = id_prefix(us)
  local id = prefix .. ARGV[2]
  -- a count goes to redis.call as a number: Redis writes an integral one
  -- as an integer (before 7.2 by "%.17g", exact below 10^17), for fewer
  -- instructions than string.format here (BENCHMARKS.md, Speed II part 19)
  local total = (tonumber(attrs[3]) or 0) + 1
  local reg = attrs[hand and 6 or 5]
  local has_reg = reg and reg ~= ""
  local waiting = may_wait(attrs[4])
  local kf, kv, token, ends, field, handed, recv, leased
  if hand and has_reg and due <= now then
    kf, kv, token, ends, field, handed, recv, leased = hand_off(reg, id, body, now, time, "0", attrs, 5)
  end
  if token then
    hand_off_count(3, ends, now)
    redis.call("ZADD", KEYS[1], token, id)
    -- the registration cleared, or counted down (kf, kv)
    redis.call("HSET", KEYS[2], id, body, "totalsent", total, kf, kv, field, handed,
      "totalrecv", recv, "redjob:leased", leased)
    -- handed: no wake-up; "redjob:waiting" stays set, so the next send wakes
    -- the queue's workers unless that worker registers again first (see
    -- send_write)
    waiting = false
  else
    redis.call("ZADD", KEYS[1], score, id)
    if kf and waiting then
      redis.call("HSET", KEYS[2], id, body, "totalsent", total, kf, kv, "redjob:waiting", woken(attrs[4]))
    elseif kf then
      redis.call("HSET", KEYS[2], id, body, "totalsent", total, kf, kv)
    elseif waiting then
      redis.call("HSET", KEYS[2], id, body, "totalsent", total, "redjob:waiting", woken(attrs[4]))
    else
      redis.call("HSET", KEYS[2], id, body, "totalsent", total)
    end
  end
  if ARGV[5] == "1" or waiting then
    redis.call("PUBLISH", ARGV[1], redis.call("ZCARD", KEYS[1]))
  end
  return {1, prefix, (may_wait(attrs[4]) or has_reg) and 1 or 0}
end
-- "redjob:prio" (attrs[5]) only for a send at a priority other than 0, the
-- one send_write reads it for: a queue without priorities has no such field,
-- and while its hash is small (a listpack) a field it lacks is looked for
-- through the whole hash (BENCHMARKS.md, Speed II part 18)
local attrs
if ARGV[4] == "0" then
  attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:handoff")
  attrs[6], attrs[5] = attrs[5], false
else
  attrs = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:prio",
    "redjob:handoff")
end
local nargs = #ARGV
if KEYS[5] then
  -- sent already: nothing to check (the queue's maxsize may have changed)
  if redis.call("ZSCORE", KEYS[5], ARGV[nargs]) then return {0} end
  nargs = nargs - 1
end
local refused, qdelay, now, us, prefix, time = send_start(attrs)
if refused then return refused end
-- a flow's parent (a whole id, with a once mark) is sent only while it waits
-- (its "<id>:w", see flow_wait.lua): one a caller cancelled (its mark is
-- there, above) never runs, nor one gone with its deleted queue ({-3}: the
-- flow above it counts it cancelled, see batches.rs)
if KEYS[5] and #ARGV[5] == 32 and redis.call("HEXISTS", KEYS[2], ARGV[5] .. ":w") == 0 then return {-3} end
local waited = (may_wait(attrs[4]) or (attrs[6] and attrs[6] ~= "")) and 1 or 0
local n = (nargs - 4) / 3
local scores = {}
local zargs, hargs = {}, {}
-- some message has a delay ("d<ms>"): its id may mark it (see index_exact)
local delayed = false
for i = 1, n do
  local b = (i - 1) * 3 + 5
  -- a 32-character suffix is a whole id, chosen beforehand (a flow's
  -- parent, which no longer waits: see flow_wait.lua); only a call with
  -- once marks sends one, so plain sends skip the check
  local id = prefix .. ARGV[b]
  if KEYS[5] and #ARGV[b] == 32 then
    id = ARGV[b]
    redis.call("HDEL", KEYS[2], id .. ":w")
    -- its id is its flow's, maybe up to a running purge's cutoff: counted
    -- in the purge's mark, so that a pass that scanned its set scans again
    -- (see purge.lua; plain sends, with fresh ids, skip this)
    local m = purge_mark(redis.call("HGET", KEYS[2], "redjob:purging"), now)
    if m and string.sub(id, 1, 10) <= m.cut then
      redis.call("HSET", KEYS[2], "redjob:purging", m.text(m.moves + 1))
    end
  end
  local when = ARGV[b + 1]
  local score = scores[when]
  if not score then
    if string.byte(when, 1) == 100 then delayed = true end
    score = due_score(when, now, us, qdelay)
    scores[when] = score
  end
  zargs[2 * i - 1] = score
  zargs[2 * i] = id
  hargs[2 * i - 1] = id
  hargs[2 * i] = ARGV[b + 2]
end
-- a worker waits for this queue and takes hand-offs: the first message, when
-- due now, goes straight to it (one hop instead of a wake-up and a fetch)
local handed = false
if attrs[6] and attrs[6] ~= "" and tonumber(zargs[1]) <= now then
  local kf, kv, token, ends, field, what, recv, leased = hand_off(attrs[6], zargs[2], hargs[2], now, time, ARGV[4])
  local at = #hargs
  if kf then
    hargs[at + 1] = kf
    hargs[at + 2] = kv
    at = at + 2
  end
  if token then
    zargs[1] = token
    hand_off_count(3, ends, now)
    hargs[at + 1] = field
    hargs[at + 2] = what
    hargs[at + 3] = "totalrecv"
    hargs[at + 4] = recv
    hargs[at + 5] = "redjob:leased"
    hargs[at + 6] = leased
    handed = true
  end
end
send_write(attrs, zargs, hargs, n, handed)
if delayed then
  -- served: a redjob worker fetched from the queue (it set one of these)
  local ex = redis.call("HMGET", KEYS[2], "redjob:leased", "redjob:exact")
  index_exact(4, zargs, worker_fetched(attrs[4]) or ex[1], ex[2])
end
if KEYS[5] then
  local old = redis.call("ZRANGEBYSCORE", KEYS[5], "-inf", string.format("%.0f", now - 7 * 86400000), "LIMIT", 0, 10)
  if #old > 0 then many("ZREM", KEYS[5], old) end
  redis.call("ZADD", KEYS[5], string.format("%.0f", now), ARGV[#ARGV])
end
return {1, prefix, waited}
