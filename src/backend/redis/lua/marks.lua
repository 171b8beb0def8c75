-- What a worker's sweep looks after (see batches.rs), in one sorted set
-- scored by when it is the sweep's to handle:
-- - "q<queue>": a queue that may hold batch finishes not counted yet. A
--   worker marks it before it settles jobs of batches there, until its own
--   lease ends from now (again a third of its lease later): while the mark
--   stands its worker counts those finishes itself. A sweep counts the
--   finishes of a queue whose mark ran out (its worker may have died between
--   its settle and its count) and drops the mark once none is left.
-- - "b<batch id>": a batch whose sealer may not have sent the callbacks its
--   seal made due, the sweep's 10 s after it was recorded; its sealer drops
--   it once they are sent. Recorded first when the batch is opened, the
--   sweep's an hour on: a batch its enqueuer never sealed (the process died,
--   or its enqueue was dropped part way) is cancelled by the sweep then.
-- - "a<batch id> <token>": jobs added to a batch that their adder may not
--   have sent, the sweep's 10 s after it was recorded (before they were
--   kept under the token, see batch_add.lua); their adder drops it once
--   they are sent, a sweep once it sent them (or an hour after the token's
--   time, when they were never kept), else it looks again 10 s later.
-- - "f<batch id>": a flow above a parent gone with its deleted queue, whose
--   worker may not have fired what the parent's finish (applied to it
--   directly: the parent's queue is gone) made due, the sweep's 10 s after
--   it was recorded; its worker drops it once fired, a sweep once it fired.
-- A mark whose sweep fails (a broken key, a script error) is put off a
-- minute ("m" or "d" again, see batches.rs), so that it keeps no other mark
-- from its sweep.
-- KEYS[1]  ns:{@workers}:bmarks
-- ARGV[1]  "m": mark queue ARGV[2] until ARGV[3] ms from now (a later mark
--          stands); "s": list up to 100 members due; "x": drop queue
--          ARGV[2]'s mark if it is still ARGV[3]; "d": record batch
--          ARGV[2], due in ARGV[3] ms (10 s without);
--          "y": drop batch ARGV[2]; "a": record additions ARGV[2]
--          ("<batch id> <token>", the token "<ms>.<random>"), due in 10 s;
--          "z": drop them; "g": record flow ARGV[2] ("f" above), due in
--          ARGV[3] ms (10 s without); "h": drop it
-- Returns  s: {member, score, member, score, ...}; otherwise 1
local now = clock()
local what = ARGV[1]
if what == "m" then
  -- a worker marks the queue before it settles jobs of batches there, and
  -- its settle waits for the mark: it must pass when Redis is at maxmemory
  -- with noeviction, as the settle does (see allow_writes in lib.lua)
  allow_writes(KEYS[1])
  redis.call("ZADD", KEYS[1], "GT", string.format("%.0f", now + tonumber(ARGV[3])), "q" .. ARGV[2])
  return 1
elseif what == "x" then
  if redis.call("ZSCORE", KEYS[1], "q" .. ARGV[2]) == ARGV[3] then redis.call("ZREM", KEYS[1], "q" .. ARGV[2]) end
  return 1
elseif what == "d" then
  redis.call("ZADD", KEYS[1], string.format("%.0f", now + (tonumber(ARGV[3]) or 10000)), "b" .. ARGV[2])
  return 1
elseif what == "y" then
  redis.call("ZREM", KEYS[1], "b" .. ARGV[2])
  return 1
elseif what == "a" then
  redis.call("ZADD", KEYS[1], string.format("%.0f", now + 10000), "a" .. ARGV[2])
  return 1
elseif what == "z" then
  redis.call("ZREM", KEYS[1], "a" .. ARGV[2])
  return 1
elseif what == "g" then
  redis.call("ZADD", KEYS[1], string.format("%.0f", now + (tonumber(ARGV[3]) or 10000)), "f" .. ARGV[2])
  return 1
elseif what == "h" then
  redis.call("ZREM", KEYS[1], "f" .. ARGV[2])
  return 1
end
return redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", string.format("(%.0f", now), "WITHSCORES", "LIMIT", 0, 100)
