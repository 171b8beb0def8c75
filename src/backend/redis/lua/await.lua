-- Registers a caller awaiting job ARGV[1] until ARGV[2] ms from now: the
-- script that finishes it (complete.lua: acked or dead-lettered; cancel.lua;
-- a delete of one job) publishes its id on the queue's done channel. The
-- hash field "redjob:awaited" tells them that some job may be awaited.
-- Expired registrations go, 100 a call.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  the queue's awaited jobs (ns:q:awaited)
-- ARGV[1]  the id
-- ARGV[2]  how long the wait lasts at most (ms)
-- Returns -1 when the queue does not exist, else 1
if redis.call("HEXISTS", KEYS[1], "vt") == 0 then return -1 end
local now = clock()
local old = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", string.format("(%.0f", now), "LIMIT", 0, 100)
if #old > 0 then many("ZREM", KEYS[2], old) end
redis.call("ZADD", KEYS[2], "GT", string.format("%.0f", now + tonumber(ARGV[2])), ARGV[1])
redis.call("HSET", KEYS[1], "redjob:awaited", "1")
return 1
