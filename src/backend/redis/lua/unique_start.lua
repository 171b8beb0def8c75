-- Frees the unique keys of jobs enqueued unique until their run starts
-- (UniqueUntil::Start: their envelope ends with "unique_until":"start"), as a
-- worker starts a run of each, before its handler: while it runs or waits for
-- a retry, an enqueue of its key makes a new job. A key another job took over
-- (after its lifetime ran out) stays with that job, and a job that holds none
-- (freed at an earlier start, or never unique) is passed over
-- (release_unique in lib.lua). Plain jobs never come here.
-- KEYS[1]  the queue's unique keys (ns:q:unique)
-- ARGV[1..]  the jobs' ids
-- Returns the number of keys freed
local freed = release_unique(KEYS[1], ARGV)
local n = 0
for _ in pairs(freed) do n = n + 1 end
return n
