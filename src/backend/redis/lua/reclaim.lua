-- A worker's listener that (re)connected asks what the sends handed it on this
-- queue (hash fields "redjob:handed <channel>" and, for the hand-offs of a
-- counted registration, "redjob:handed <channel> <n>", n from 2 to HANDS_MAX:
-- see hand_off in lib.lua): their messages may have been lost with the
-- connection before (a network drop, Redis closing a slow subscriber). The
-- answers go out on the worker's own channel, after every hand-off published
-- before this call, so that when they arrive the worker has read each of them
-- that reached it: a job it does not hold is released, uncounted, at once (not
-- after its lease). Nothing is published for a job no longer leased by its
-- hand-off (it ran and was settled, or was released). The fields are removed;
-- at a clean stop the worker calls this without publishing, to drop them.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..22]  the sorted sets of priorities 10..1, then -1..-10
-- ARGV[1]  the worker's hand-off channel
-- ARGV[2]  the queue's name
-- ARGV[3]  "1": publish the answers, "? <queue> <id> <token> <priority>" each,
--          on ARGV[1]; "0": only remove the fields
-- Returns how many jobs handed are still leased by their hand-offs (each
--         published when asked)
local base = "redjob:handed " .. ARGV[1]
local fields = {base}
for n = 2, HANDS_MAX do fields[n] = base .. " " .. n end
local notes = redis.call("HMGET", KEYS[2], unpack(fields))
local present = {}
for n = 1, HANDS_MAX do
  if notes[n] then present[#present + 1] = fields[n] end
end
if #present == 0 then return 0 end
redis.call("HDEL", KEYS[2], unpack(present))
local held = 0
for n = 1, HANDS_MAX do
  local handed = notes[n]
  local id, token, p
  if handed then id, token, p = string.match(handed, "^(%S+) (%S+) (%S+)$") end
  local score = id and redis.call("ZSCORE", level_key(tonumber(p) or 0, 3), id)
  if score and tonumber(score) == tonumber(token) then
    held = held + 1
    if ARGV[3] == "1" then
      redis.call("PUBLISH", ARGV[1], "? " .. ARGV[2] .. " " .. handed)
    end
  end
end
return held
