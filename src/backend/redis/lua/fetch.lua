-- Leases up to n due jobs for a worker. Each is re-scored to now + lease; the
-- score's thousandths carry the job's delivery count, so the score is also the
-- delivery's fencing token ("<lease ms>.<count, 3 digits>"). No per-message
-- fields are written: a re-delivery after a crash is counted from the score.
-- RSMQ-style receives (by RSMQ clients, or redjob's queue API) count deliveries in
-- "<id>:rc" fields; those are read only when such receives ever happened on the
-- queue, that is when "totalrecv" (every receive) differs from "redjob:leased"
-- (the fetches' share).
-- When fewer than n were due, the worker will wait: the hash field
-- "redjob:waiting" asks the next send to wake it (see send.lua).
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- ARGV[1]  the most jobs to lease
-- ARGV[2]  lease length in ms
-- Returns {now µs, earliest remaining score or "" (only when fewer than asked
--          were leased), lease end ms, the queue's maxsize (-1: none), due ids
--          without a body that were removed, id, body, delivery count, id, body,
--          count, ...}; {0, "", 0, -1, -1} when the queue does not exist
-- a missing queue costs one command (workers check it every few seconds)
local attrs = redis.call("HMGET", KEYS[2], "vt", "totalrecv", "redjob:leased", "redjob:waiting", "maxsize")
if not attrs[1] then return {0, "", 0, -1, -1} end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[1])
local lease = now + tonumber(ARGV[2])
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "WITHSCORES", "LIMIT", 0, max)
local out = {tonumber(t[1]) * 1000000 + tonumber(t[2]), "", lease, -1, -1}
local n = #due / 2
out[4] = tonumber(attrs[5]) or -1
out[5] = 0
local totalrecv = tonumber(attrs[2]) or 0
local ours = tonumber(attrs[3]) or 0
local set, z, orphans = {}, {}, {}
if n > 0 then
  local foreign = totalrecv ~= ours
  local per = foreign and 2 or 1
  local fields = {}
  for k = 1, n do
    local id = due[2 * k - 1]
    if foreign then
      fields[2 * k - 1] = id
      fields[2 * k] = id .. ":rc"
    else
      fields[k] = id
    end
  end
  local vals = many("HMGET", KEYS[2], fields)
  local tokens = {}
  for k = 1, n do
    local id = due[2 * k - 1]
    local body = vals[per * (k - 1) + 1]
    if body then
      local score = tonumber(due[2 * k])
      local count = math.floor((score - math.floor(score)) * 1000 + 0.5)
      if foreign then
        local rc = tonumber(vals[2 * k]) or 0
        if rc > count then count = rc end
      end
      count = math.min(count + 1, 999)
      local token = tokens[count]
      if not token then
        token = string.format("%d.%03d", lease, count)
        tokens[count] = token
      end
      z[#z + 1] = token
      z[#z + 1] = id
      out[#out + 1] = id
      out[#out + 1] = body
      out[#out + 1] = count
    else
      orphans[#orphans + 1] = id
    end
  end
  if #orphans > 0 then
    many("ZREM", KEYS[1], orphans)
    out[5] = #orphans
  end
  if #z > 0 then
    if #orphans == 0 then allow_writes(KEYS[1]) end
    many("ZADD", KEYS[1], z)
    local leased = #z / 2
    set = {"totalrecv", string.format("%.0f", totalrecv + leased),
           "redjob:leased", string.format("%.0f", ours + leased)}
  end
end
-- fewer leased than asked (orphans count as not leased): the worker will wait
if #z / 2 < max then
  local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
  if #first > 0 then out[2] = first[2] end
  if attrs[4] ~= "1" then
    set[#set + 1] = "redjob:waiting"
    set[#set + 1] = "1"
  end
end
if #set > 0 then
  if #z == 0 then allow_writes(KEYS[1]) end
  redis.call("HSET", KEYS[2], unpack(set))
end
return out
