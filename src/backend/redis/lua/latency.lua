-- How long the longest-waiting ready job has waited: the earliest due time of a
-- due job, or lease end of a lease that ran out, over every priority in use (one
-- ZRANGEBYSCORE ... LIMIT 0 1 per level, never a scan).
-- KEYS[1..4], KEYS[5..24]  as counts.lua
-- Returns {-1} when the queue does not exist, else {1, waited ms}, or {1, -1} when
-- no job is ready
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local oldest = nil
local function seen(t)
  if not oldest or t < oldest then oldest = t end
end
for _, level in ipairs(level_sets(tonumber(attrs[2]) or 0, 5)) do
  local due = redis.call("ZRANGEBYSCORE", level[2], "-inf", due_max(now), "WITHSCORES", "LIMIT", 0, 1)
  if due[2] then seen(math.floor(tonumber(due[2]))) end
end
if not oldest then return {1, -1} end
return {1, math.max(0, now - oldest)}
