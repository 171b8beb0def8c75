-- Picks up, once, what an RSMQ client's deleteQueue left of a queue that an RSMQ
-- client's createQueue made again (see take_up_left in lib.lua), as create.lua
-- does for a queue redjob makes: a fetch asks for it (see fetch.lua) when the
-- queue's hash field "redjob:waiting" is missing (no redjob create, send or
-- fetch wrote it) or "+" (a redjob send to such a queue wrote it, see woken in
-- lib.lua). Then it writes the field, "1" for a missing one ("1" and none read
-- alike: a send wakes the queue's workers; a worker has fetched), "-" for "+",
-- so that the fetches after it go on as ever.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  the queue's unique keys (ns:q:unique)
-- KEYS[3..22]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[23]  the queue's sorted set (ns:q): a write that cannot grow memory
--           first, so that a Redis at maxmemory lets the HSETs after it
--           through (see allow_writes in lib.lua): fetches drain there too
-- Returns 1 when done (or done before), 0 when the queue does not exist
local w = redis.call("HMGET", KEYS[1], "vt", "redjob:waiting")
if not w[1] then return 0 end
if w[2] and w[2] ~= "+" then return 1 end
allow_writes(KEYS[23])
take_up_left(1, 2, 3)
redis.call("HSET", KEYS[1], "redjob:waiting", w[2] and "-" or "1")
return 1
