-- A worker's listener that (re)connected asks what the last send handed it on
-- this queue (hash field "redjob:handed <channel>", see hand_off in lib.lua):
-- its message may have been lost with the connection before (a network drop,
-- Redis closing a slow subscriber). The answer goes out on the worker's own
-- channel, after every hand-off published before this call, so that when it
-- arrives the worker has read each of them that reached it: the job it does not
-- hold is released, uncounted, at once (not after its lease). Nothing is
-- published for a job no longer leased by that hand-off (it ran and was
-- settled, or was released). The field is removed; at a clean stop the worker
-- calls this without publishing, to drop it.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..22]  the sorted sets of priorities 10..1, then -1..-10
-- ARGV[1]  the worker's hand-off channel
-- ARGV[2]  the queue's name
-- ARGV[3]  "1": publish the answer, "? <queue> <id> <token> <priority>", on
--          ARGV[1]; "0": only remove the field
-- Returns 1 when a job handed is still leased by its hand-off (and was published
--         when asked), else 0
local field = "redjob:handed " .. ARGV[1]
local handed = redis.call("HGET", KEYS[2], field)
if not handed then return 0 end
redis.call("HDEL", KEYS[2], field)
local id, token, p = string.match(handed, "^(%S+) (%S+) (%S+)$")
local score = id and redis.call("ZSCORE", level_key(tonumber(p) or 0, 3), id)
if not score or tonumber(score) ~= tonumber(token) then return 0 end
if ARGV[3] == "1" then
  redis.call("PUBLISH", ARGV[1], "? " .. ARGV[2] .. " " .. handed)
end
return 1
