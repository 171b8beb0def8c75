-- Changes a message's visibility to now + vt, if the message still exists. The
-- score's thousandths (a redjob delivery count) are kept, so making a job visible
-- again never resets the count that guards against crash loops.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV[1]  message id
-- ARGV[2]  visibility timeout in ms from now
-- Returns -1 when the queue does not exist, 0 when the message does not, 1 when changed
if redis.call("HEXISTS", KEYS[2], "vt") == 0 then return -1 end
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score then return 0 end
local count = math.floor((tonumber(score) - math.floor(tonumber(score))) * 1000 + 0.5)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZADD", KEYS[1], string.format("%d.%03d", now + tonumber(ARGV[2]), count), ARGV[1])
return 1
