-- Reads or stores a queue's settings: fields of its hash that RSMQ ignores
-- (see QueueSettings::FIELDS), in force for every worker (complete.lua reads
-- the dead-letter retention from them), each with who stored it and when in
-- a field of its own (QueueSettings::BY_FIELDS, "<ms> <who>").
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist
-- ARGV[1]  "get" to read, "set" to store over what is stored, "default" to
--          store only where nothing is stored
-- ARGV[2]  the number of settings fields N
-- ARGV[3 .. 2 + N]  the fields' names
-- ARGV[3 + N .. 2 + 2N]  their values ("" leaves a field as it is; "p<n>" or
--          "g<n>" changes one part of the concurrency "<per worker> <global>"
--          to n, 0 for none, and keeps the other as stored; "h<mask> <value>"
--          or "d<mask> <value>" changes the fields of the history or the
--          dead-letter retention the mask marks "1" to value's and keeps the
--          others as stored; see part.rs; "-" removes the field and who
--          set it, "set" only)
-- ARGV[3 + 2N .. 2 + 3N]  the names of the fields recording who set each
-- ARGV[3 + 3N]  who stores them ("get": unused)
-- Returns {-1} when the queue does not exist, else {1, how many fields
--         changed (a value given as stored changes none, and keeps who set
--         it), then each field's value after the change (false where none
--         is stored), then who set each}
-- The stored concurrency `old` (nil, or one Rust would not read: no limit)
-- with the part change `change` ("p<n>" or "g<n>") applied, in the stored
-- form Concurrency::encode writes (numbers after the second are dropped).
local function merge_part(old, change)
  local pw, g, rest = string.match(old or "", "^(%d+) (%d+)(.*)$")
  if not pw then pw, g, rest = string.match(old or "", "^(%d+)$"), "0", "" end
  pw, g = tonumber(pw), tonumber(g)
  if not pw or (rest ~= "" and string.sub(rest, 1, 1) ~= " ") or pw > 1000000 or g > 1000000 then
    pw, g = 0, 0
  end
  local v = tonumber(string.sub(change, 2)) or 0
  if string.sub(change, 1, 1) == "p" then pw = v else g = v end
  if g > 0 then return string.format("%d %d", pw, g) end
  return string.format("%d", pw)
end
-- Whether `v` is a stored history ("h") or dead-letter retention ("d") Rust
-- reads (History::decode, decode_retention in settings/mod.rs; fits in
-- lib.lua).
local function readable(kind, v)
  if kind == "d" then
    local keep, age = string.match(v, "^(%d+) (%d+)$")
    return keep ~= nil and fits(keep, U64) and fits(age, U64)
  end
  local on, keep, age, minus, args = string.match(v, "^([01]) (%d+) (%d+) (%-?)(%d+)$")
  if not on or not fits(keep, U64) or not fits(age, U64) or not fits(args, I64) then
    return false
  end
  -- below -1: not a value Rust reads
  return minus == "" or tonumber(args) <= 1
end
-- The stored history or retention `old` (nil, or one Rust would not read:
-- the change's defaults) with the change `change` ("h<mask> <value>" or
-- "d<mask> <value>") applied: the fields marked from value, the others as
-- written in old.
local function merge_fields(old, change)
  local kind, mask, value = string.match(change, "^([hd])([01]+) (.*)$")
  if not readable(kind, old or "") then return value end
  local kept, given = {}, {}
  for w in string.gmatch(old, "%S+") do kept[#kept + 1] = w end
  for w in string.gmatch(value, "%S+") do given[#given + 1] = w end
  for i = 1, #mask do
    if string.sub(mask, i, i) == "1" then kept[i] = given[i] end
  end
  return table.concat(kept, " ")
end
local n = tonumber(ARGV[2])
if not redis.call("HGET", KEYS[1], "vt") then return {-1} end
local mode = ARGV[1]
local changed = 0
if mode ~= "get" then
  -- a worker reads its queues' settings this way before it leases, so this
  -- must pass when Redis is at maxmemory with noeviction, as the worker
  -- scripts do (see allow_writes in lib.lua): a first write that cannot grow
  -- memory (HDEL of the empty field, which no message has), after which
  -- Redis lets the writes below through
  redis.call("HDEL", KEYS[1], "")
  local change = string.format("%.0f %s", clock(), ARGV[3 + 3 * n])
  for i = 1, n do
    local field, value, by = ARGV[2 + i], ARGV[2 + n + i], ARGV[2 + 2 * n + i]
    local old = redis.call("HGET", KEYS[1], field)
    if string.match(value, "^[pg]%d+$") then
      value = merge_part(old, value)
    elseif string.match(value, "^[hd][01]+ ") then
      value = merge_fields(old, value)
    end
    if value == "-" then
      if mode == "set" and old then
        redis.call("HDEL", KEYS[1], field, by)
        changed = changed + 1
      end
    elseif value ~= "" and value ~= old then
      if mode == "set" then
        redis.call("HSET", KEYS[1], field, value, by, change)
        changed = changed + 1
      elseif not old then
        redis.call("HSET", KEYS[1], field, value, by, change)
        changed = changed + 1
      end
    end
  end
end
local fields = {}
for i = 1, n do
  fields[i] = ARGV[2 + i]
  fields[n + i] = ARGV[2 + 2 * n + i]
end
local out = redis.call("HMGET", KEYS[1], unpack(fields))
table.insert(out, 1, changed)
table.insert(out, 1, 1)
return out
