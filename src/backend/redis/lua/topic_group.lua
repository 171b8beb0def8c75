-- Creates a subscriber (a consumer group) at an offset, or moves one there (a
-- replay), telling Redis how many events come before the offset when that is
-- known from a bounded read: at the beginning, at the end, before the first
-- event, or with at most CAP events after the offset. Otherwise (an offset
-- deeper in the topic, or past its last id) Redis is told nothing: it does not
-- know the subscriber's lag until the subscriber has read up to the end, and
-- topic_info.lua counts it up to its cap. Never reads more than CAP + 1 events,
-- however long the topic.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2]  the subscriber's epoch (ns:t:{topic}:epoch:<subscriber>): set to
--          Redis's time in microseconds when the subscriber is made (one made
--          anew does not take an old one's), one more when a move takes it
--          back before the last id it took (a read may deliver events anew:
--          topic_settle.lua settles the deliveries made before no more)
-- ARGV[1]  the subscriber
-- ARGV[2]  "create" (an existing subscriber stays where it is), "move" (it must
--          exist) or "forward" (a move that never goes back: a subscriber
--          whose last id taken is at or after the offset stays)
-- ARGV[3]  the offset, the last id taken: "0-0" for the beginning, "$" for the end
-- Returns 1 when created or moved, 0 when it existed (create) or is at or past
--         the offset already (forward), -1 when there is no such subscriber
--         (move, forward), -2 when the offset (of a move, or of a
--         subscriber made) is past the last id and over a minute past now (it
--         would skip every event published until then)
local CAP = 100
local key, group, mode, offset = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
-- whether an offset is over a minute past now (the minute: a client's clock
-- a little ahead of Redis's asking for "now")
local function too_late(o)
  local ms = tonumber(string.match(o, "^(%d+)-"))
  if not ms then return false end
  local t = redis.call("TIME")
  return ms > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 60000
end
-- a subscriber made: its epoch starts at Redis's time, microseconds
local function made()
  local t = redis.call("TIME")
  redis.call("SET", KEYS[2], string.format("%.0f", tonumber(t[1]) * 1000000 + tonumber(t[2])))
end
local exists, taken = false, nil
if redis.call("EXISTS", key) == 1 then
  for _, g in ipairs(redis.call("XINFO", "GROUPS", key)) do
    local name, last_taken
    for i = 1, #g, 2 do
      if g[i] == "name" then name = g[i + 1] end
      if g[i] == "last-delivered-id" then last_taken = g[i + 1] end
    end
    if name == group then exists, taken = true, last_taken end
  end
else
  if mode ~= "create" then return -1 end
  -- an empty topic: the offset is all there is to set
  if too_late(offset) then return -2 end
  redis.call("XGROUP", "CREATE", key, group, offset, "MKSTREAM")
  made()
  return 1
end
if mode == "create" and exists then return 0 end
if mode ~= "create" and not exists then return -1 end
local info = redis.call("XINFO", "STREAM", key)
local length, added, last = 0, 0, "0-0"
for i = 1, #info, 2 do
  if info[i] == "length" then length = info[i + 1] end
  if info[i] == "entries-added" then added = info[i + 1] end
  if info[i] == "last-generated-id" then last = info[i + 1] end
end
-- whether stream id a comes after b ("<ms>-<seq>", decimal digits)
local function later(a, b)
  local am, as = string.match(a, "^(%d+)-(%d+)$")
  local bm, bs = string.match(b, "^(%d+)-(%d+)$")
  if not (am and bm) then return false end
  local function above(x, y)
    if #x ~= #y then return #x > #y end
    return x > y
  end
  if am ~= bm then return above(am, bm) end
  return above(as, bs)
end
-- a skip forward never moves a subscriber back ("$" is the end: never back)
if mode == "forward" and offset ~= "$" and taken and not later(offset, taken) then
  return 0
end
-- the events after the offset, when known (nil: more than CAP)
local after
if offset == "$" then
  offset, after = last, 0
elseif later(offset, last) then
  -- past the end: the events published until the offset will never be read,
  -- so "all of them read" would overstate what it took; a point over a
  -- minute past now too is refused
  if too_late(offset) then return -2 end
  after = nil
elseif offset == "0-0" or #redis.call("XRANGE", key, "-", offset, "COUNT", 1) == 0 then
  -- nothing at or before the offset: every event is after it
  after = length
else
  local r = redis.call("XRANGE", key, "(" .. offset, "+", "COUNT", CAP + 1)
  if #r <= CAP then after = #r end
end
local cmd = exists and "SETID" or "CREATE"
if not exists then
  made()
elseif taken and offset ~= "$" and later(taken, offset) then
  redis.call("INCR", KEYS[2])
end
if after then
  redis.call("XGROUP", cmd, key, group, offset, "ENTRIESREAD", math.max(added - after, 0))
else
  redis.call("XGROUP", cmd, key, group, offset)
end
return 1
