-- A topic's length, ids and memory, and per subscriber its offset, pending count,
-- lag, consumers and dead letters. A lag Redis does not know (after events were
-- deleted from the middle of the stream) is counted, a thousand events per call.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2..] the dead letters of each subscriber named in ARGV, in that order
-- ARGV[1..] the subscribers whose dead letters are counted (from a first call)
-- Returns {0} when the topic does not exist, else {1, length, published, first,
--         last, memory, then per subscriber: name, offset, pending, lag,
--         consumers, dead letters (-1 when not in ARGV)}
local key = KEYS[1]
if redis.call("EXISTS", key) == 0 then return {0} end
local info = redis.call("XINFO", "STREAM", key)
local length, added, first, last = 0, 0, false, false
for i = 1, #info, 2 do
  local f, v = info[i], info[i + 1]
  if f == "length" then length = v end
  if f == "entries-added" then added = v end
  if f == "first-entry" and type(v) == "table" then first = v[1] end
  if f == "last-entry" and type(v) == "table" then last = v[1] end
end
local dead = {}
for i = 1, #ARGV do dead[ARGV[i]] = KEYS[i + 1] end
local out = {1, length, added, first, last, redis.call("MEMORY", "USAGE", key, "SAMPLES", 0)}
for _, g in ipairs(redis.call("XINFO", "GROUPS", key)) do
  local row = {}
  for i = 1, #g, 2 do row[g[i]] = g[i + 1] end
  local lag = row["lag"]
  if type(lag) ~= "number" then
    lag = 0
    local from = "(" .. row["last-delivered-id"]
    while true do
      local r = redis.call("XRANGE", key, from, "+", "COUNT", 1000)
      lag = lag + #r
      if #r < 1000 then break end
      from = "(" .. r[#r][1]
    end
  end
  local d = -1
  if dead[row["name"]] then d = redis.call("XLEN", dead[row["name"]]) end
  out[#out + 1] = row["name"]
  out[#out + 1] = row["last-delivered-id"]
  out[#out + 1] = row["pending"]
  out[#out + 1] = math.min(lag, length)
  out[#out + 1] = row["consumers"]
  out[#out + 1] = d
end
return out
