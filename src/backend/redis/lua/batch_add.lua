-- Adds jobs to a batch while it runs (see batches.rs): its total grows by
-- their number, so it completes only once they finish too, and they take
-- the indexes from its "next" on. They are kept in KEYS[2] under their first
-- index until their adder has sent them (each group with a once mark), for
-- a sweep to send should it stop first.
-- KEYS[1]  the batch's hash (ns:@batch:<id>, see batch.lua)
-- KEYS[2]  its jobs added and not known to be sent (ns:@batch:<id>:adds):
--          "<first index> <token>" -> the jobs, as encode_added in
--          batch_adds.rs (the token names the adder's sweep mark, see
--          marks.lua)
-- ARGV[1]  how many jobs
-- ARGV[2]  the jobs, stored as they are
-- ARGV[3]  the adder's token
-- Returns their first index; -1 when the batch does not exist, -2 when it
--         completed, -3 when it was cancelled, -4 when it was opened by an
--         older redjob (no "next") and is not sealed yet
local v = redis.call("HMGET", KEYS[1], "created", "completed", "cancelled_at", "next", "sealed", "total")
if not v[1] then return -1 end
if v[2] then return -2 end
if v[3] then return -3 end
local n = tonumber(ARGV[1])
-- a batch opened before "next" was kept: its indexes end at its total once sealed
local start = tonumber(v[4]) or (v[5] == "1" and tonumber(v[6]))
if not start then return -4 end
redis.call("HSET", KEYS[1], "next", start + n)
redis.call("HINCRBY", KEYS[1], "total", n)
redis.call("HSET", KEYS[2], start .. " " .. ARGV[3], ARGV[2])
return start
