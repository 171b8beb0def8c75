-- Tells which epoch a read's deliveries belong to when the subscriber's epoch
-- changed while the read ran (a blocking read GETs the epoch as its wait
-- begins and again once it returned; a rewind in between changed it). The
-- read delivered its events either after the rewind (in its epoch) or before
-- it (in the epoch read first, whose outcomes the rewind stops). An event is
-- taken for a delivery of the epoch of now only when no read of that epoch
-- can deliver it anew: its pending entry is still this consumer's first
-- delivery (count 1) and the subscriber's last id taken is at or past it (a
-- rewind made after the read, which took the subscriber back before it,
-- left the last id taken below it; a read that delivered it anew since made
-- another consumer's pending entry). Else it keeps the epoch read first: its
-- outcome is then not applied, and it runs again after a lease (the safe
-- side).
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2]  the subscriber's epoch (ns:t:{topic}:epoch:<subscriber>, see
--          topic_group.lua; missing is 0)
-- ARGV[1]  the subscriber, ARGV[2] this consumer
-- ARGV[3..] the ids the read delivered (at most a read's batch)
-- Returns {the epoch of now, then per id 1 (a delivery of the epoch of now)
--         or 0 (of the epoch read first)}
local key, group, me = KEYS[1], ARGV[1], ARGV[2]
local out = {tonumber(redis.call("GET", KEYS[2]) or "0")}
-- the subscriber's last id taken (nil when it is gone)
local taken
local groups = redis.pcall("XINFO", "GROUPS", key)
if type(groups) == "table" and not groups.err then
  for _, g in ipairs(groups) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == "name" then name = g[i + 1] end
      if g[i] == "last-delivered-id" then last = g[i + 1] end
    end
    if name == group then taken = last end
  end
end
-- whether stream id a is at or before b ("<ms>-<seq>", decimal digits)
local function upto(a, b)
  local am, as = string.match(a, "^(%d+)-(%d+)$")
  local bm, bs = string.match(b, "^(%d+)-(%d+)$")
  if not (am and bm) then return false end
  local function below(x, y)
    if #x ~= #y then return #x < #y end
    return x < y
  end
  if am ~= bm then return below(am, bm) end
  return as == bs or below(as, bs)
end
for i = 3, #ARGV do
  local ok = 0
  if taken and upto(ARGV[i], taken) then
    local p = redis.pcall("XPENDING", key, group, ARGV[i], ARGV[i], 1)
    if not p.err and p[1] and p[1][2] == me and tonumber(p[1][4]) == 1 then ok = 1 end
  end
  out[#out + 1] = ok
end
return out
