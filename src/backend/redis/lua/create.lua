-- Creates a queue's attributes as RSMQ's createQueue does (HSETNX of each).
-- KEYS[1]  the queue's hash (ns:q:Q)
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
redis.call("PUBLISH", ARGV[4], 0)
return 1
