-- Lists a cancelled batch for workers (see batch_adds.rs). KEYS[1] scores
-- each batch by when it was listed, on this node's clock and strictly
-- increasing, so that a worker reading on from the last score it saw misses
-- none; a batch listed already keeps its score. Drops up to 100 batches
-- listed over a week ago.
-- KEYS[1]  the cancelled batches (ns:@cancelled)
-- ARGV[1]  the batch's id
-- Returns its score
local had = redis.call("ZSCORE", KEYS[1], ARGV[1])
if had then return tonumber(had) end
local now = clock()
local score = math.floor(now)
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
redis.call("ZADD", KEYS[1], string.format("%.0f", score), ARGV[1])
local old = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", string.format("(%.0f", now - 604800000), "LIMIT", 0, 100)
if #old > 0 then many("ZREM", KEYS[1], old) end
return score
