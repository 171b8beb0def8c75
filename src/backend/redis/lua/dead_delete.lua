-- Deletes dead letters by id, or all of a queue's (purge; UNLINK frees a large
-- set in the background). With a cutoff (a bulk delete's start, see
-- ops/redis.rs), a letter that died after it is left, and nothing is done
-- until Redis's clock has passed it.
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist
-- KEYS[2]  the dead letters' sorted set (ns:q:dead)
-- KEYS[3]  the dead letters' hash (ns:q:dead:Q)
-- ARGV[1]  "all"; or "ids" followed by the ids in ARGV[2..]; or "upto", the
--          cutoff (the latest time of death, Unix ms) in ARGV[2], then the ids;
--          or "oldest", a cutoff in ARGV[2] and a count n in ARGV[3]: the n
--          oldest letters that died by the cutoff
-- Returns -1 when the queue does not exist, -2 when Redis's clock has not
--         passed the cutoff yet (nothing done), else how many were deleted
if redis.call("HEXISTS", KEYS[1], "vt") == 0 then return -1 end
if ARGV[1] == "all" then
  local n = redis.call("ZCARD", KEYS[2])
  redis.call("UNLINK", KEYS[2], KEYS[3])
  return n
end
local first, cutoff = 2, nil
if ARGV[1] == "upto" or ARGV[1] == "oldest" then
  first, cutoff = 3, tonumber(ARGV[2])
  if clock() <= cutoff then return -2 end
end
local given = {}
if ARGV[1] == "oldest" then
  -- by score alone: at most n, whatever the set's size
  given = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", ARGV[2], "LIMIT", 0, tonumber(ARGV[3]))
else
  for i = first, #ARGV do given[#given + 1] = ARGV[i] end
end
if cutoff and ARGV[1] ~= "oldest" and #given > 0 then
  local died = many("ZMSCORE", KEYS[2], given)
  local kept = {}
  for i, id in ipairs(given) do
    if died[i] and tonumber(died[i]) <= cutoff then kept[#kept + 1] = id end
  end
  given = kept
end
local ids, fields = {}, {}
for _, id in ipairs(given) do
  ids[#ids + 1] = id
  for _, f in ipairs({id, id .. ":n", id .. ":err", id .. ":p", id .. ":a", id .. ":k", id .. ":u"}) do fields[#fields + 1] = f end
end
if #ids == 0 then return 0 end
local _, n = many("ZREM", KEYS[2], ids)
many("HDEL", KEYS[3], fields)
return n
