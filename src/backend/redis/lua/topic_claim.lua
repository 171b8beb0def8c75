-- Takes over a subscriber's events that no consumer has touched for a while (their
-- consumer died, or their retry is due), with how often each was delivered
-- (this delivery included). Events trimmed from the topic meanwhile leave the
-- pending list.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- ARGV[1]  the subscriber, ARGV[2] this consumer
-- ARGV[3]  the least idle time, ms
-- ARGV[4]  the most events
-- ARGV[5]  where the scan of the pending list starts ("0-0" for the start)
-- Returns {-1} when the subscriber does not exist, else {0, next start ("0-0"
--         when the scan went round), then per event: id, deliveries, type, data,
--         to (false where missing)}
local key, group, me = KEYS[1], ARGV[1], ARGV[2]
local r = redis.pcall("XAUTOCLAIM", key, group, me, ARGV[3], ARGV[5], "COUNT", ARGV[4])
if r.err then
  if string.find(r.err, "NOGROUP") then return {-1} end
  return redis.error_reply(r.err)
end
local out = {0, r[1]}
for _, e in ipairs(r[2]) do
  local id, fields = e[1], e[2]
  local p = redis.call("XPENDING", key, group, id, id, 1)
  local typ, data, to = false, false, false
  if type(fields) == "table" then
    for i = 1, #fields, 2 do
      if fields[i] == "type" then typ = fields[i + 1] end
      if fields[i] == "data" then data = fields[i + 1] end
      if fields[i] == "to" then to = fields[i + 1] end
    end
  end
  out[#out + 1] = id
  out[#out + 1] = p[1] and p[1][4] or 1
  out[#out + 1] = typ
  out[#out + 1] = data
  out[#out + 1] = to
end
return out
