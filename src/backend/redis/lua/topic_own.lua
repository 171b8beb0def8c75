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
-- Redis at maxmemory (noeviction) refuses a script whose first write may grow
-- memory (see allow_writes in lib.lua), as SET may: an owner renews with
-- PEXPIRE, which cannot, and one taking it first DELs the missing key, which
-- cannot either, so that an ordered subscriber is taken and held (and its
-- events drained) while memory is full
if owner then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
redis.call("DEL", KEYS[1])
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return 1
