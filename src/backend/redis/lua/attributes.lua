-- Reads a queue's attributes and message counts as RSMQ's getQueueAttributes does.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- Returns {-1} when the queue does not exist, else
--         {1, vt, delay, maxsize, totalrecv, totalsent, created, modified, msgs, hiddenmsgs}
local a = redis.call("HMGET", KEYS[2], "vt", "delay", "maxsize", "totalrecv", "totalsent", "created", "modified")
if not a[1] then return {-1} end
local t = redis.call("TIME")
local msgs = redis.call("ZCARD", KEYS[1])
-- RSMQ counts hidden messages from the start of the current second
local hidden = redis.call("ZCOUNT", KEYS[1], t[1] .. "000", "+inf")
return {1, a[1], a[2], a[3], a[4] or "0", a[5] or "0", a[6], a[7], msgs, hidden}
