-- Prepended to every script. Lua's unpack() takes a few thousand values at most,
-- so a command over a long list runs in chunks. `step` must be even for pair lists.
-- Returns the chunks' array replies joined, or their integer replies summed.
local function many(cmd, key, list, step)
  step = step or 4000
  local joined, sum = {}, 0
  for i = 1, #list, step do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
    if type(r) == "table" then
      for j = 1, #r do joined[#joined + 1] = r[j] end
    else
      sum = sum + r
    end
  end
  return joined, sum
end

-- Workers must keep draining a queue when Redis is at maxmemory with noeviction
-- (acks free memory). Redis refuses only a script's first write over maxmemory,
-- and only a write that may grow memory: so before a first write that may, the
-- worker scripts make one that cannot (ZREM of the empty member, which no
-- message has).
local function allow_writes(zset)
  redis.call("ZREM", zset, "")
end

-- A queue's sorted sets to read, highest priority first, as {priority, key}:
-- KEYS[1] (priority 0) and, when the caller passed the level keys (KEYS[3..22]:
-- priorities 10..1, then -1..-10), each level whose bit (priority + 10) is set in
-- `mask`, the hash field "redjob:prio" that sends keep.
local function level_sets(mask)
  if mask == 0 or #KEYS < 22 then return {{0, KEYS[1]}} end
  local out = {}
  for p = 10, -10, -1 do
    if p == 0 then
      out[#out + 1] = {0, KEYS[1]}
    elseif bit.band(mask, bit.lshift(1, p + 10)) ~= 0 then
      out[#out + 1] = {p, KEYS[p > 0 and 13 - p or 12 - p]}
    end
  end
  return out
end
