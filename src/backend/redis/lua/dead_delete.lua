-- Deletes dead letters by id, or all of a queue's (purge; UNLINK frees a large
-- set in the background).
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist
-- KEYS[2]  the dead letters' sorted set (ns:q:dead)
-- KEYS[3]  the dead letters' hash (ns:q:dead:Q)
-- ARGV[1]  "all", or "ids" followed by the ids in ARGV[2..]
-- Returns -1 when the queue does not exist, else how many were deleted
if redis.call("HEXISTS", KEYS[1], "vt") == 0 then return -1 end
if ARGV[1] == "all" then
  local n = redis.call("ZCARD", KEYS[2])
  redis.call("UNLINK", KEYS[2], KEYS[3])
  return n
end
local ids, fields = {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  ids[#ids + 1] = id
  for _, f in ipairs({id, id .. ":n", id .. ":err", id .. ":p"}) do fields[#fields + 1] = f end
end
if #ids == 0 then return 0 end
local _, n = many("ZREM", KEYS[2], ids)
many("HDEL", KEYS[3], fields)
return n
