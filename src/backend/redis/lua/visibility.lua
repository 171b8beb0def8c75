-- Changes a message's visibility to now + vt, if the message still exists, at any
-- priority. The score's thousandths (a redjob delivery count) are kept, so making
-- a job visible again never resets the count that guards against crash loops.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..22]  the sorted sets of the other priorities (ns:q:p<n>)
-- KEYS[23]  the queue's lease counts (ns:q:leases): a lease whose job this makes
--          visible again leaves them (the job is no longer leased)
-- KEYS[24]  the queue's exact dues (ns:q:exact): a delayed message made
--          visible at the ms its send's score rounded its exact due up to
--          leaves them (see rescore in lib.lua)
-- ARGV[1]  message id
-- ARGV[2]  visibility timeout in ms from now
-- Returns -1 when the queue does not exist, 0 when the message does not, 1 when changed
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return -1 end
local level, score = find_level(tonumber(attrs[2]) or 0, 3, ARGV[1])
if not level then return 0 end
local count = score_count(tonumber(score))
local now = clock()
lease_counts().left(23, {tonumber(score)}, now)
local s = now + tonumber(ARGV[2])
redis.call("ZADD", level[2], string.format("%d.%03d", s, count), ARGV[1])
-- after the ZADD: a write that may grow memory comes first (maxmemory)
if count == 0 then rescore(ARGV[1], s, 24) end
return 1
