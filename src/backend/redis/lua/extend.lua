-- Extends the leases a worker still holds: one call for all its running jobs of a queue.
-- KEYS[1]  the queue's sorted set (ns:q)
-- ARGV[1]  lease length in ms from now
-- ARGV[2..] id, token pairs
-- Returns one value per pair: the new token (its lease end never earlier than the
--         old one's), or 0 when the job's score is no longer
--         that token (the lease expired and the job was delivered again, or it is gone)
local now = clock()
local lease = LEASED + now + tonumber(ARGV[1])
local ids = {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local scores = many("ZMSCORE", KEYS[1], ids)
local z, out = {}, {}
for k, id in ipairs(ids) do
  local token = ARGV[2 * k + 1]
  if scores[k] and tonumber(scores[k]) == tonumber(token) then
    -- never earlier than it was: a released job's lease ends after every earlier
    -- delivery's (see fetch.lua), and a renewal keeps it so
    local new = string.format("%.0f.%s", math.max(lease, tonumber(string.match(token, "^%d+"))), string.sub(token, -3))
    z[#z + 1] = new
    z[#z + 1] = id
    out[k] = new
  else
    out[k] = 0
  end
end
if #z > 0 then
  allow_writes(KEYS[1])
  many("ZADD", KEYS[1], z)
end
return out
