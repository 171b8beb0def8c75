-- Reads or stores a queue's settings: fields of its hash that RSMQ ignores
-- (see QueueSettings::FIELDS), in force for every worker (complete.lua reads
-- the dead-letter retention from them).
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist
-- ARGV[1]  "get" to read, "set" to store over what is stored, "default" to
--          store only where nothing is stored
-- ARGV[2]  the number of settings fields N
-- ARGV[3 .. 2 + N]  the fields' names
-- ARGV[3 + N .. 2 + 2N]  their values ("" leaves a field as it is)
-- Returns {-1} when the queue does not exist, else {1, then each field's value
--         after the change (false where none is stored)}
local n = tonumber(ARGV[2])
if not redis.call("HGET", KEYS[1], "vt") then return {-1} end
local mode = ARGV[1]
if mode ~= "get" then
  for i = 1, n do
    local field, value = ARGV[2 + i], ARGV[2 + n + i]
    if value ~= "" then
      if mode == "set" then
        redis.call("HSET", KEYS[1], field, value)
      else
        redis.call("HSETNX", KEYS[1], field, value)
      end
    end
  end
end
local fields = {}
for i = 1, n do fields[i] = ARGV[2 + i] end
local out = redis.call("HMGET", KEYS[1], unpack(fields))
table.insert(out, 1, 1)
return out
