-- Wakes a queue's workers when a fetch waits for a place under its global
-- concurrency (hash field "redjob:held", see fetch.lua): called after an
-- operator's cancel or purge, which may have freed places (a settle and a
-- delete wake them themselves, see complete.lua and delete.lua).
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV[1]  the queue's realtime channel (ns:rt:q)
-- Returns 1 when it woke them, else 0
if redis.call("HGET", KEYS[2], "redjob:held") ~= "1" then return 0 end
redis.call("HSET", KEYS[2], "redjob:held", "0")
redis.call("PUBLISH", ARGV[1], redis.call("ZCARD", KEYS[1]))
return 1
