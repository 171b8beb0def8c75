-- Takes over a subscriber's events that no consumer has touched for a while (their
-- consumer died, or their retry is due), with how often each was delivered
-- (this delivery included). Events trimmed from the topic meanwhile leave the
-- pending list.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2]  the subscriber's attempt records (ns:t:{topic}:attempts:<subscriber>,
--          see topic_settle.lua): an event whose last delivery left no record
--          (its consumer died with it) gets a `lease_lost` one for it, which
--          replaces records numbered past the count it had (an earlier
--          delivery's, which a rewind's read replaced with a count of 1); one
--          trimmed from the topic loses its records
-- KEYS[3]  the subscriber's epoch (ns:t:{topic}:epoch:<subscriber>, see
--          topic_group.lua), returned with the events: a settle names it
-- ARGV[1]  the subscriber, ARGV[2] this consumer
-- ARGV[3]  the least idle time, ms
-- ARGV[4]  the most events
-- ARGV[5]  where the scan of the pending list starts ("0-0" for the start)
-- ARGV[6]  ms: the subscriber's consumers idle for this long that hold nothing
--          (a killed worker's, or one that stopped holding events claimed
--          since) leave it, up to 1000 a call; "0" for none (XINFO CONSUMERS
--          lists them all: the caller asks now and then, not at each claim;
--          an ACL that refuses it leaves them)
-- Returns {-1} when the subscriber does not exist, else {0, next start ("0-0"
--         when the scan went round), the subscriber's epoch (0 when missing),
--         then per event: id, deliveries, type, data, to (false where missing)}
local key, group, me = KEYS[1], ARGV[1], ARGV[2]
local r = redis.pcall("XAUTOCLAIM", key, group, me, ARGV[3], ARGV[5], "COUNT", ARGV[4])
if r.err then
  if string.find(r.err, "NOGROUP") then return {-1} end
  return redis.error_reply(r.err)
end
local out = {0, r[1], tonumber(redis.call("GET", KEYS[3]) or "0")}
-- events trimmed from the topic meanwhile left the pending list (Redis 7's
-- third reply): their records go with them
if type(r[3]) == "table" and #r[3] > 0 then many("HDEL", KEYS[2], r[3]) end
-- the events delivered before, and how often
local again, counts = {}, {}
for _, e in ipairs(r[2]) do
  local id, fields = e[1], e[2]
  local p = redis.call("XPENDING", key, group, id, id, 1)
  local d = p[1] and tonumber(p[1][4]) or 1
  if d > 1 then
    again[#again + 1] = id
    counts[#again] = d
  end
  local typ, data, to = false, false, false
  if type(fields) == "table" then
    for i = 1, #fields, 2 do
      if fields[i] == "type" then typ = fields[i + 1] end
      if fields[i] == "data" then data = fields[i + 1] end
      if fields[i] == "to" then to = fields[i + 1] end
    end
  end
  out[#out + 1] = id
  out[#out + 1] = d
  out[#out + 1] = typ
  out[#out + 1] = data
  out[#out + 1] = to
end
if #again > 0 then
  local logs = redis.call("EXISTS", KEYS[2]) == 1 and many("HMGET", KEYS[2], again) or {}
  local set = {}
  for j, id in ipairs(again) do
    local last = tonumber(string.match(string.match(logs[j] or "", "[^\n]*$"), '^{"n":(%d+)') or 0)
    local lost = '{"n":' .. (counts[j] - 1) .. ',"outcome":"lease_lost"}'
    if last > counts[j] - 1 then
      -- numbered past the count it had: an earlier delivery's, which a
      -- rewind's read replaced (its count started over) and whose first run
      -- left no record: the replay's history starts over with the lost run
      set[#set + 1] = id
      set[#set + 1] = lost
    elseif last < counts[j] - 1 then
      set[#set + 1] = id
      set[#set + 1] = append_attempt(logs[j] or nil, lost)
    end
  end
  if #set > 0 then many("HSET", KEYS[2], set) end
end
local gone = tonumber(ARGV[6]) or 0
if gone > 0 then
  local cs = redis.pcall("XINFO", "CONSUMERS", key, group)
  if type(cs) == "table" and not cs.err then
    local left = 1000
    for _, c in ipairs(cs) do
      if left == 0 then break end
      local name, pending, idle
      for i = 1, #c, 2 do
        if c[i] == "name" then name = c[i + 1] end
        if c[i] == "pending" then pending = c[i + 1] end
        if c[i] == "idle" then idle = c[i + 1] end
      end
      if name and name ~= me and pending == 0 and idle and idle >= gone then
        redis.call("XGROUP", "DELCONSUMER", key, group, name)
        left = left - 1
      end
    end
  end
end
return out
