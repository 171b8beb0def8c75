-- Creates a queue's attributes as RSMQ's createQueue does (HSETNX of each).
-- An RSMQ client's deleteQueue removes ns:q and ns:q:Q alone: redjob's keys of
-- a queue it deleted stay. Of those, the jobs at other priorities (members of
-- ns:q:p<n> without a body) and the unique keys they and the others held are
-- picked up here: the queue's hash says which levels have a sorted set
-- ("redjob:prio", so fetches read them and drop the members without a body)
-- and that unique keys exist ("redjob:unique", so fetches sweep those of jobs
-- that are gone, see sweep_unique in lib.lua).
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  the queue's unique keys (ns:q:unique)
-- KEYS[3..22]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- ARGV[1]  vt (seconds), ARGV[2] delay (seconds), ARGV[3] maxsize (bytes or -1)
-- ARGV[4]  the queue's realtime channel (ns:rt:q): workers already waiting for the
--          queue to exist are told (the message is the queue's length, 0)
-- Returns 1 when created, 0 when the queue exists already
if redis.call("HSETNX", KEYS[1], "vt", ARGV[1]) == 0 then return 0 end
local t = redis.call("TIME")
redis.call("HSETNX", KEYS[1], "delay", ARGV[2])
redis.call("HSETNX", KEYS[1], "maxsize", ARGV[3])
redis.call("HSETNX", KEYS[1], "created", t[1])
redis.call("HSETNX", KEYS[1], "modified", t[1])
-- the workers waiting are told here: a send need not (see may_wait in lib.lua)
redis.call("HSET", KEYS[1], "redjob:waiting", "-")
-- what a queue of the name deleted by an RSMQ client left: its levels and
-- unique keys (see take_up_left in lib.lua; a fetch has adopt.lua do the
-- same for a queue an RSMQ client made again, see fetch.lua)
take_up_left(1, 2, 3)
-- (the PUBLISH stays on line 31, where the tests of an ACL's refusal look:
-- convert.rs)

redis.call("PUBLISH", ARGV[4], 0)
return 1
