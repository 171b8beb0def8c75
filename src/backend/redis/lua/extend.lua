-- Extends the leases a worker still holds: one call for all its running jobs of a queue.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's lease counts (ns:q:leases, see lease_counts in lib.lua)
-- ARGV[1]  lease length in ms from now
-- ARGV[2..] id, token pairs
-- Returns one value per pair: the new token (its lease end never earlier than the
--         old one's), or 0 when the job's score is no longer
--         that token (the lease expired and the job was delivered again, or it is gone)
local now = clock()
local lease = now + tonumber(ARGV[1])
local ids = {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local scores = many("ZMSCORE", KEYS[1], ids)
local z, out, ends = {}, {}, {}
for k, id in ipairs(ids) do
  local token = ARGV[2 * k + 1]
  if scores[k] and tonumber(scores[k]) == tonumber(token) then
    -- never earlier than it was: a released job's lease ends after every earlier
    -- delivery's (see fetch.lua), and a renewal keeps it so
    local old = tonumber(string.match(token, "^%d+"))
    local to = math.max(lease, old)
    local new = string.format("%.0f.%s", to, string.sub(token, -3))
    z[#z + 1] = new
    z[#z + 1] = id
    out[k] = new
    ends[old] = (ends[old] or 0) - 1
    ends[to] = (ends[to] or 0) + 1
  else
    out[k] = 0
  end
end
if #z > 0 then
  allow_writes(KEYS[1])
  many("ZADD", KEYS[1], z)
  local leases = lease_counts()
  leases.changes(2, ends, now)
  leases.prune(2, now)
end
return out
