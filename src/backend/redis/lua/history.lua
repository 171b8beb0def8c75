-- Lists a queue's history (see history.rs) a page at a time, newest first
-- (ties by id, reversed), starting after a cursor as dead.lua does. Entries
-- past the history's age are not shown (and trimmed, at most 1000 a call),
-- nor bodies past their age.
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist; its field
--          "redjob:history" is the setting in force
-- KEYS[2]  the history's sorted set (ns:q:history)
-- KEYS[3]  the history's hash (ns:q:history:Q)
-- ARGV[1]  the most rows
-- ARGV[2], ARGV[3]  the cursor's score (ms) and id; ARGV[2] is "" for the first page
-- ARGV[4]  the history setting when the queue stores none
-- Returns {-1} when the queue does not exist, else {now ms, then per row: id,
--         finished ms, entry (false where missing), 1 when its body may be
--         shown (0: past the arguments' age)}
local setting = redis.call("HMGET", KEYS[1], "vt", "redjob:history")
if not setting[1] then return {-1} end
local now = clock()
local on, keep, age, args = history_setting(setting[2], ARGV[4])
trim_history(2, 3, now, 1000, keep, age, args, true)
local key, want = KEYS[2], tonumber(ARGV[1])
local cs, cid = ARGV[2], ARGV[3]
local start = 0
if cs ~= "" then
  local s = redis.call("ZSCORE", key, cid)
  if s and tonumber(s) == tonumber(cs) then
    start = redis.call("ZREVRANK", key, cid) + 1
  else
    start = redis.call("ZCOUNT", key, "(" .. cs, "+inf") + redis.call("ZCOUNT", key, cs, cs) - ties_below(key, cs, cid)
  end
end
local out = {now}
if want <= 0 then return out end
local t = redis.call("ZREVRANGE", key, start, start + want - 1, "WITHSCORES")
local ids = {}
for j = 1, #t, 2 do ids[#ids + 1] = t[j] end
local vals = #ids > 0 and many("HMGET", KEYS[3], ids) or {}
for j = 1, #t, 2 do
  local at = tonumber(t[j + 1])
  if age > 0 and at < now - age then break end
  out[#out + 1] = t[j]
  out[#out + 1] = t[j + 1]
  out[#out + 1] = vals[(j + 1) / 2]
  out[#out + 1] = (args < 0 or at >= now - args) and 1 or 0
end
return out
