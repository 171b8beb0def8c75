-- Looks one job up by id: in the queue at any priority (a member without a body
-- is not looked at), in its dead letters, or in its history (see history.rs:
-- not past the history's age; its body not past the arguments' age).
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  dead letters' sorted set (ns:q:dead)
-- KEYS[4]  dead letters' hash (ns:q:dead:Q)
-- KEYS[5..24]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[25]  the queue's lease counts (unused here)
-- KEYS[26], KEYS[27]  the history's list (not read: an entry says when it
--          finished) and hash (ns:q:history:ids, ns:q:history:Q)
-- KEYS[28]  the queue's keyed set (ns:q:keyed): a keyed job waiting for its
--          key's place is found there ("k", as "q" otherwise)
-- KEYS[29]  the queue's concurrency keys (ns:q:keys): a keyed job's per key
-- ARGV[1]  the id
-- ARGV[2]  the history setting when the queue stores none
-- Returns {-1} when the queue does not exist; {now ms} when the job is in
--         neither; else {now ms, where, attempt records, concurrency key,
--         priority, id, score, body, count, error} (see with_fields): the
--         key is "<per key> <key>" or false; where is "q" in the queue
--         (count: its rc field) or "d" dead (score: when it died; count: its
--         deliveries; priority: the one it had); the attempt records are the
--         "<id>:a" field (see append_attempt in lib.lua) or false; or {now ms,
--         "h", entry, 1 when its body may be shown (0: past the arguments'
--         age)} from the history; or {now ms, "w", "<batch id>\n<body>"}, a
--         flow's parent waiting for its children (the hash field "<id>:w")
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio", "redjob:history")
if not attrs[1] then return {-1} end
local now = clock()
local id = ARGV[1]
local out = {now}
local level, s = find_level(tonumber(attrs[2]) or 0, 5, id)
-- a member without a body (an RSMQ client's deleteMessage of a job at a
-- priority other than 0 leaves its id in ns:q:p<n>) is no job, as for a fetch
-- (which drops it) or a unique send
local body = redis.call("HEXISTS", KEYS[2], id) == 1
local kv = #KEYS >= 28 and redis.call("HGET", KEYS[2], id .. ":k")
-- its key with the key's per key
local function keyed()
  if not kv then return false end
  local key = string.sub(kv, 20)
  local e = #KEYS >= 29 and redis.call("HGET", KEYS[29], key)
  return (e and string.match(e, "^%d+") or "1") .. " " .. key
end
if level and body then
  out[2] = "q"
  out[3] = redis.call("HGET", KEYS[2], id .. ":a")
  out[4] = keyed()
  for _, v in ipairs(with_fields(KEYS[2], {{level[1], id, s}}, ":rc")) do out[#out + 1] = v end
  return out
end
-- a keyed job waiting for its key: its member's due and count as its score
if body and kv and redis.call("ZSCORE", KEYS[28], string.sub(kv, 20) .. "\0" .. string.sub(kv, 1, 19) .. id) then
  out[2] = "k"
  out[3] = redis.call("HGET", KEYS[2], id .. ":a")
  out[4] = keyed()
  local s = string.format("%.0f.%s", tonumber(string.sub(kv, 1, 16)), string.sub(kv, 17, 19))
  for _, v in ipairs(with_fields(KEYS[2], {{0, id, s}}, ":rc")) do out[#out + 1] = v end
  return out
end
local d = redis.call("ZSCORE", KEYS[3], id)
if d then
  out[2] = "d"
  out[3] = redis.call("HGET", KEYS[4], id .. ":a")
  out[4] = redis.call("HGET", KEYS[4], id .. ":k")
  local p = tonumber(redis.call("HGET", KEYS[4], id .. ":p")) or 0
  for _, v in ipairs(with_fields(KEYS[4], {{p, id, d}}, ":n")) do out[#out + 1] = v end
  return out
end
local e = redis.call("HGET", KEYS[27], id)
local at = entry_ms(e)
if at then
  local _, _, age, args = history_setting(attrs[3], ARGV[2])
  if age == 0 or at >= now - age then
    out[2] = "h"
    out[3] = e
    out[4] = (args < 0 or at >= now - args) and 1 or 0
    return out
  end
end
-- a flow's parent waiting for its children (see flow_wait.lua)
local w = redis.call("HGET", KEYS[2], id .. ":w")
if w then
  out[2] = "w"
  out[3] = w
end
return out
