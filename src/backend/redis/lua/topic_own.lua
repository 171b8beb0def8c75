-- Takes, renews or gives up the ownership of an ordered subscriber: its events
-- are read by its owner alone.
-- KEYS[1]  the owner (ns:t:{topic}:owner:<subscriber>): a string expiring with
--          the owner's lease
-- ARGV[1]  this consumer
-- ARGV[2]  the lease in ms, or 0 to give it up
-- Returns 1 when this consumer owns it now, else 0
local owner = redis.call("GET", KEYS[1])
if ARGV[2] == "0" then
  if owner == ARGV[1] then redis.call("DEL", KEYS[1]) end
  return 0
end
if owner and owner ~= ARGV[1] then return 0 end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return 1
