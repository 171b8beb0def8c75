-- Adds an event to a queue's history: "<ms> <what> <count> <who>" in the
-- history hash's field "~events" (the last 100, see HistoryEvent in
-- history.rs), at Redis's clock now.
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist
-- KEYS[2]  the queue's history hash (ns:q:history:Q)
-- ARGV[1]  what (one word), ARGV[2] how many jobs, ARGV[3] who
-- ARGV[4]  the history setting when the queue stores none: with the history
--          off, nothing is added
-- Returns -1 when the queue does not exist, 0 when the history is off, else 1
local attrs = redis.call("HMGET", KEYS[1], "vt", "redjob:history")
if not attrs[1] then return -1 end
if not history_setting(attrs[2], ARGV[4]) then return 0 end
add_history_event(2, clock(), ARGV[1], tonumber(ARGV[2]) or 0, ARGV[3])
return 1
