-- Pauses or resumes a queue's workers, or reads whether they are paused. The
-- hash field "redjob:paused" makes every fetch lease nothing (fetch.lua), so
-- workers see it on their next fetch; sends still go in. A resume wakes the
-- workers that wait at once (they listen on the realtime channel).
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV[1]  "1" to pause, "0" to resume, "" to read only, "t" to end a
--          handler's throttle (hash field "redjob:throttled", see complete.lua)
--          and wake the workers it held: returns 1 when one was in force
-- ARGV[2]  the queue's realtime channel (ns:rt:q)
-- Returns -1 when the queue does not exist, else 1 when it is paused (after the
--         change), 0 when not
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:paused", "redjob:throttled")
if not attrs[1] then return -1 end
if ARGV[1] == "t" then
  if not attrs[3] then return 0 end
  redis.call("HDEL", KEYS[2], "redjob:throttled")
  if throttle_end(attrs[3], clock()) == 0 then return 0 end
  redis.call("PUBLISH", ARGV[2], redis.call("ZCARD", KEYS[1]))
  return 1
end
if ARGV[1] == "1" then
  if not attrs[2] then redis.call("HSET", KEYS[2], "redjob:paused", "1") end
  return 1
elseif ARGV[1] == "0" then
  if attrs[2] then
    redis.call("HDEL", KEYS[2], "redjob:paused")
    redis.call("PUBLISH", ARGV[2], redis.call("ZCARD", KEYS[1]))
  end
  return 0
end
return attrs[2] and 1 or 0
