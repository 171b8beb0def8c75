-- Withdraws a worker's hand-off registration (hash field "redjob:handoff", see
-- fetch.lua) while it is still the one in place: the worker's running slots
-- filled with other jobs, so it could not start a handed job at once.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- ARGV[1]  the registration, "v3 <lease ms> <channel> <queue>"
-- Returns 1 when it was withdrawn, else 0
if redis.call("HGET", KEYS[1], "redjob:handoff") ~= ARGV[1] then return 0 end
redis.call("HSET", KEYS[1], "redjob:handoff", "")
return 1
