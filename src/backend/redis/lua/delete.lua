-- Deletes messages: their sorted set members and their body, rc and fr fields.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV     message ids
-- Returns {members removed from the sorted set, fields removed from the hash}
local fields = {}
for _, id in ipairs(ARGV) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
end
local _, n = many("ZREM", KEYS[1], ARGV)
local _, h = many("HDEL", KEYS[2], fields)
return {n, h}
