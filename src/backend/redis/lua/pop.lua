-- Receives and deletes up to n due messages, as RSMQ's popMessage does (no fr is stored).
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV[1]  the most messages to pop
-- Returns {-1} when the queue does not exist, else {1, id, body, rc, fr, ...}
if redis.call("HEXISTS", KEYS[2], "vt") == 0 then return {-1} end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, tonumber(ARGV[1]))
local out = {1}
if #ids == 0 then return out end
local fields = {}
for _, id in ipairs(ids) do
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":fr"
end
local vals = many("HMGET", KEYS[2], fields, 3000)
many("ZREM", KEYS[1], ids)
many("HDEL", KEYS[2], fields)
local n = 0
for i, id in ipairs(ids) do
  local body = vals[i * 3 - 2]
  if body then
    n = n + 1
    out[#out + 1] = id
    out[#out + 1] = body
    out[#out + 1] = (tonumber(vals[i * 3 - 1]) or 0) + 1
    out[#out + 1] = tonumber(vals[i * 3]) or now
  end
end
if n > 0 then redis.call("HINCRBY", KEYS[2], "totalrecv", n) end
return out
