-- Updates a queue's attributes and its modified time, as RSMQ's setQueueAttributes does.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- ARGV     field, value pairs (vt, delay, maxsize)
-- Returns 0 when the queue does not exist, 1 when updated
if redis.call("HEXISTS", KEYS[1], "vt") == 0 then return 0 end
local t = redis.call("TIME")
redis.call("HSET", KEYS[1], "modified", t[1], unpack(ARGV))
return 1
