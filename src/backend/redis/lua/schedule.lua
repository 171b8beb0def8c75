-- Pauses or resumes one periodic schedule of a queue, for every worker that
-- ticks it: while paused, periodic.lua records its ticks and enqueues nothing.
-- The queue need not exist yet (a schedule's first tick creates it).
-- KEYS[1]  the queue's periodic hash (ns:q:periodic): "<name>:paused" ->
--          "<ms> <who>", when and by whom it was paused
-- ARGV[1]  the schedule's name; ARGV[2] "pause" or "resume"; ARGV[3] who
-- Returns 1 when that changed something, 0 when it was so already
local field = ARGV[1] .. ":paused"
if ARGV[2] == "resume" then return redis.call("HDEL", KEYS[1], field) end
if redis.call("HEXISTS", KEYS[1], field) == 1 then return 0 end
redis.call("HSET", KEYS[1], field, string.format("%.0f ", clock()) .. ARGV[3])
return 1
