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
--          to n, 0 for none, and keeps the other as stored, see part.rs)
-- ARGV[3 + 2N .. 2 + 3N]  the names of the fields recording who set each
-- ARGV[3 + 3N]  who stores them ("get": unused)
-- Returns {-1} when the queue does not exist, else {1, then each field's value
--         after the change (false where none is stored), then who set each}
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
local n = tonumber(ARGV[2])
if not redis.call("HGET", KEYS[1], "vt") then return {-1} end
local mode = ARGV[1]
if mode ~= "get" then
  -- a worker reads its queues' settings this way before it leases, so this
  -- must pass when Redis is at maxmemory with noeviction, as the worker
  -- scripts do (see allow_writes in lib.lua): a first write that cannot grow
  -- memory (HDEL of the empty field, which no message has), after which
  -- Redis lets the HSETNX below through, stored or not
  redis.call("HDEL", KEYS[1], "")
  local change = string.format("%.0f %s", clock(), ARGV[3 + 3 * n])
  for i = 1, n do
    local field, value, by = ARGV[2 + i], ARGV[2 + n + i], ARGV[2 + 2 * n + i]
    if string.match(value, "^[pg]%d+$") then
      value = merge_part(redis.call("HGET", KEYS[1], field), value)
    end
    if value ~= "" then
      if mode == "set" then
        redis.call("HSET", KEYS[1], field, value, by, change)
      elseif redis.call("HSETNX", KEYS[1], field, value) == 1 then
        redis.call("HSET", KEYS[1], by, change)
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
table.insert(out, 1, 1)
return out
