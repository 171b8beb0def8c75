-- Deletes messages, at any priority: their sorted set members and their body, rc
-- and fr fields.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..]  the sorted sets of the other priorities (ns:q:p<n>)
-- ARGV     message ids
-- Returns {members removed from the sorted sets, fields removed from the hash}
local fields = {}
for _, id in ipairs(ARGV) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
end
local _, n = many("ZREM", KEYS[1], ARGV)
-- only the levels a send ever used (see fetch.lua)
local mask = tonumber(redis.call("HGET", KEYS[2], "redjob:prio")) or 0
if mask ~= 0 then
  for k = 3, #KEYS do
    local p = k <= 12 and 13 - k or 12 - k
    if bit.band(mask, bit.lshift(1, p + 10)) ~= 0 then
      local _, m = many("ZREM", KEYS[k], ARGV)
      n = n + m
    end
  end
end
local _, h = many("HDEL", KEYS[2], fields)
return {n, h}
