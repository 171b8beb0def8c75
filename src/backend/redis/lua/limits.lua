-- Reads how much of a queue's limits across the fleet is in use (see fleet_limits
-- in lib.lua and fetch.lua), as a fetch would count it now. Reads only.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  the queue's lease counts (ns:q:leases)
-- KEYS[3]  the queue's starts under a rate limit (ns:q:starts)
-- Returns {-1} when the queue does not exist, else {now ms, leases in flight,
--         starts in the rate window, when a full limit lets the next job start
--         (ms, 0: no limit is full), until when a handler's throttle holds the
--         queue (ms, 0: none)}
local attrs = redis.call("HMGET", KEYS[1], "vt", "redjob:concurrency", "redjob:rate", "redjob:throttled")
if not attrs[1] then return {-1} end
local now = clock()
local _, global, rate_n, rate_ms = fleet_limits(attrs[2], attrs[3])
-- the lease counts are KEYS[2] (lease_counts takes the index)
local n, this, first_s = lease_counts().after(2, now)
local inflight = n + this
local used = 0
if rate_n > 0 then
  used = redis.call("ZCOUNT", KEYS[3], string.format("(%.0f", now - rate_ms), "+inf")
end
local at = 0
if global > 0 and inflight >= global then
  at = ((first_s or math.floor(now / 1000)) + 1) * 1000
end
if rate_n > 0 and used >= rate_n then
  local o = redis.call("ZRANGEBYSCORE", KEYS[3], string.format("(%.0f", now - rate_ms), "+inf", "WITHSCORES", "LIMIT", 0, 1)
  at = math.max(at, (tonumber(o[2]) or now) + rate_ms)
end
local throttled = throttle_end(attrs[4], now)
return {now, inflight, used, at, throttled}
