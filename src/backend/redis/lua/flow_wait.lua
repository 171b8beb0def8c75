-- Records a flow's parent that waits for its children (see batches.rs): the
-- queue's hash field "<id>:w" holds "<batch id>\n<body>" until the parent is
-- sent (send.lua) or failed (flow_fail.lua), so that it is found by id
-- (job.lua) and awaited meanwhile. RSMQ ignores the field.
-- KEYS[1]  the parent's queue's hash (ns:q:Q)
-- ARGV[1]  the parent's id
-- ARGV[2]  "<batch id>\n<body>"
-- Returns -1 when the queue does not exist, else 1
if not redis.call("HGET", KEYS[1], "vt") then return -1 end
redis.call("HSET", KEYS[1], ARGV[1] .. ":w", ARGV[2])
return 1
