-- Creates a subscriber (a consumer group) at an offset, or moves one there (a
-- replay), telling Redis how many events come before the offset so that the
-- group's lag stays known. Counting the events after an offset other than the
-- beginning or the end reads them all, a thousand per call.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- ARGV[1]  the subscriber
-- ARGV[2]  "create" (an existing subscriber stays where it is) or "move" (it must exist)
-- ARGV[3]  the offset, the last id taken: "0-0" for the beginning, "$" for the end
-- Returns 1 when created or moved, 0 when it existed (create), -1 when there is
--         no such subscriber (move)
local key, group, mode, offset = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local exists = false
if redis.call("EXISTS", key) == 1 then
  for _, g in ipairs(redis.call("XINFO", "GROUPS", key)) do
    for i = 1, #g, 2 do
      if g[i] == "name" and g[i + 1] == group then exists = true end
    end
  end
else
  if mode == "move" then return -1 end
  -- an empty topic: the offset is all there is to set
  redis.call("XGROUP", "CREATE", key, group, offset, "MKSTREAM")
  return 1
end
if mode == "create" and exists then return 0 end
if mode == "move" and not exists then return -1 end
local info = redis.call("XINFO", "STREAM", key)
local length, added, last = 0, 0, "0-0"
for i = 1, #info, 2 do
  if info[i] == "length" then length = info[i + 1] end
  if info[i] == "entries-added" then added = info[i + 1] end
  if info[i] == "last-generated-id" then last = info[i + 1] end
end
local after = 0
if offset == "$" then
  offset = last
elseif offset == "0-0" then
  after = length
else
  local from = "(" .. offset
  while true do
    local r = redis.call("XRANGE", key, from, "+", "COUNT", 1000)
    after = after + #r
    if #r < 1000 then break end
    from = "(" .. r[#r][1]
  end
end
local read = math.max(added - after, 0)
if exists then
  redis.call("XGROUP", "SETID", key, group, offset, "ENTRIESREAD", read)
else
  redis.call("XGROUP", "CREATE", key, group, offset, "ENTRIESREAD", read)
end
return 1
