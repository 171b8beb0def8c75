-- Lists a queue's history (see history.rs) a page at a time, newest first
-- (jobs finished in the same ms in the reverse of the order they were
-- entered), starting after a cursor. Entries past the history's age are not
-- shown (and trimmed, at most 1000 a call), nor bodies past their age. A
-- history indexed by a sorted set (as before the list) is moved into the
-- list first, its newest 1000 a call.
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist; its field
--          "redjob:history" is the setting in force
-- KEYS[2]  the history's list (ns:q:history:ids, oldest first: see
--          trim_history in lib.lua)
-- KEYS[3]  the history's hash (ns:q:history:Q)
-- KEYS[4]  the history's sorted set from before the list (ns:q:history: ids
--          by finish ms), emptied into the list
-- ARGV[1]  the most rows
-- ARGV[2], ARGV[3]  the cursor's finish ms and id; ARGV[2] is "" for the first page
-- ARGV[4]  the history setting when the queue stores none
-- Returns {-1} when the queue does not exist, else {now ms, then per row: id,
--         finished ms, entry (false where missing), 1 when its body may be
--         shown (0: past the arguments' age, -1: no row, skip it: an entry of
--         a job since requeued and entered again)}
local setting = redis.call("HMGET", KEYS[1], "vt", "redjob:history")
if not setting[1] then return {-1} end
local now = clock()
local on, keep, age, args = history_setting(setting[2], ARGV[4])
-- the sorted set's newest go before the list's oldest, each as "~<ms>
-- <id>" (see history_ms in lib.lua: its job may be a dead letter requeued,
-- to be entered again); an id whose entry says another time was entered
-- again since, and is in the list already
local old = redis.call("ZREVRANGE", KEYS[4], 0, 999, "WITHSCORES")
if #old > 0 then
  local ids = {}
  for j = 1, #old, 2 do ids[#ids + 1] = old[j] end
  local vals = many("HMGET", KEYS[3], ids)
  local push = {}
  for j = 1, #ids do
    local at = entry_ms(vals[j])
    if at == tonumber(old[2 * j]) then push[#push + 1] = string.format("~%.0f ", at) .. ids[j] end
  end
  if #push > 0 then
    many("LPUSH", KEYS[2], push)
    -- (the places in the list count from its head: see trim_history)
    redis.call("HINCRBY", KEYS[3], "~base", -#push)
  end
  many("ZREM", KEYS[4], ids)
end
trim_history(2, 3, now, 1000, keep, age, args, true)
local key, want = KEYS[2], tonumber(ARGV[1])
local out = {now}
if want <= 0 then return out end
-- rows are the elements before `stop`, newest first
local stop = redis.call("LLEN", key)
if ARGV[2] ~= "" then
  local ms = tonumber(ARGV[2])
  stop = history_find(2, 3, ARGV[3], ms, "~" .. ARGV[2] .. " " .. ARGV[3])
    -- a cursor whose job is gone: after the jobs of its ms
    or history_seek(2, 3, 0, stop, ms, false)
end
local t = stop > 0 and redis.call("LRANGE", key, math.max(0, stop - want), stop - 1) or {}
local vals = #t > 0 and many("HMGET", KEYS[3], t) or {}
-- the time of the row after (newer), for an element without an entry
local later = now
for j = #t, 1, -1 do
  local id, ms = history_element(t[j])
  local e, skip = vals[j], false
  local at = entry_ms(e)
  if ms then
    e = redis.call("HGET", KEYS[3], id)
    -- shown while its job's entry is still the one of that ms
    skip = entry_ms(e) ~= ms
    at = ms
  end
  at = at or later
  later = at
  if age > 0 and at < now - age then break end
  out[#out + 1] = id
  out[#out + 1] = string.format("%.0f", at)
  out[#out + 1] = (not skip) and e or false
  out[#out + 1] = skip and -1 or ((args < 0 or at >= now - args) and 1 or 0)
end
return out
