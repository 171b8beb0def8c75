-- Fails a flow's parent whose child died or was cancelled (see batches.rs),
-- or that a caller cancelled while it waited (see parents.rs):
-- the parent, never sent, is dead-lettered with the reason as its error, or
-- entered in the history as cancelled, once however often this runs (its
-- once mark), and no longer waits (its hash field "<id>:w", see
-- flow_wait.lua). A caller awaiting it learns it; when the parent is itself a
-- child of a flow, its finish is entered in KEYS[8] for that flow to count.
-- KEYS[1]  the parent's queue's hash (ns:q:Q)
-- KEYS[2], KEYS[3]  its dead letters (ns:q:dead, ns:q:dead:Q)
-- KEYS[4], KEYS[5]  its history (ns:q:history:ids, ns:q:history:Q)
-- KEYS[6]  its once marks (ns:q:once, see send.lua): up to 10 over 7 days
--          old are dropped, as a marked send drops them
-- KEYS[7]  its awaited jobs (ns:q:awaited, see await.lua)
-- KEYS[8]  its batch finishes (ns:q:bout, see complete.lua)
-- KEYS[9]  its waited-for jobs (ns:q:deps, see dep.lua): the flows that wait
--          for the parent learn it failed, as its own flow does
-- ARGV[1]  the parent's id
-- ARGV[2]  its body
-- ARGV[3]  "d" dead-letter it, "c" cancel it
-- ARGV[4]  why (its dead letter's error; its history entry's actor)
-- ARGV[5]  the once mark
-- ARGV[6]  the history setting when the queue stores none
-- ARGV[7]  the queue's realtime channel (ns:rt:q)
-- ARGV[8]  its own flow's finish, "<batch id> <index>d<id>" or "... <index>c<id>",
--          or ""
-- ARGV[9]  optional: a caller's cancel of the parent while it waits (see
--          parents.rs): the once mark of the parent's send, entered too so
--          that it is never sent; nothing happens unless the parent waits
--          (its "<id>:w"); ARGV[4] is then the history entry's actor line.
--          Both marks are scored a century ahead, so that the sends' trim
--          of marks older than 7 days never drops them while the flow runs
--          on; once the flow fired the callback they guard (its parent's
--          send or failure, found marked) they are scored then (parents.rs),
--          and go 7 days on, as the flow's batch does
-- ARGV[10] optional: "1" when the parent's flow was sealed, so that the
--          parent waited in its queue: one that no longer waits, no mark
--          saying it failed, went with its queue, deleted since (and maybe
--          created again): nothing is done, as send.lua sends it not
-- Returns {-1} when the queue does not exist, {0} when the mark was there
--         (failed already) or a cancel found the parent not waiting, {-3}
--         when a sealed flow's parent no longer waits (ARGV[10]), else
--         {1, the finishes entered in KEYS[8]...}
local attrs = redis.call("HMGET", KEYS[1], "vt", "redjob:history", "redjob:awaited", "redjob:bout")
if not attrs[1] then return {-1} end
local id = ARGV[1]
local by_caller = ARGV[9] and ARGV[9] ~= ""
if by_caller and redis.call("HEXISTS", KEYS[1], id .. ":w") == 0 then return {0} end
if redis.call("ZSCORE", KEYS[6], ARGV[5]) then return {0} end
if ARGV[10] == "1" and redis.call("HEXISTS", KEYS[1], id .. ":w") == 0 then return {-3} end
local now = clock()
local at = string.format("%.0f", now)
-- a queue whose flows all fail keeps no mark for ever (only marked sends
-- dropped them)
local old = redis.call("ZRANGEBYSCORE", KEYS[6], "-inf", string.format("%.0f", now - 7 * 86400000), "LIMIT", 0, 10)
if #old > 0 then many("ZREM", KEYS[6], old) end
if by_caller then
  local kept = string.format("%.0f", now + 100 * 365 * 86400000)
  redis.call("ZADD", KEYS[6], kept, ARGV[5], kept, ARGV[9])
else
  redis.call("ZADD", KEYS[6], at, ARGV[5])
end
redis.call("HDEL", KEYS[1], id .. ":w")
if ARGV[3] == "d" then
  redis.call("ZADD", KEYS[2], at, id)
  redis.call("HSET", KEYS[3], id, ARGV[2], id .. ":err", ARGV[4], id .. ":n", "0")
end
local on, keep, age, args = history_setting(attrs[2], ARGV[6])
if on then
  local by = by_caller and ARGV[4] or "flow: " .. ARGV[4]
  enter_history(4, 5, id, ARGV[3] == "d" and "dead" or "cancelled", 0, {ARGV[2]}, by, now, keep, age, args, nil)
end
notify_awaited(7, {id}, ARGV[7], attrs[3])
local out = {1}
if ARGV[8] ~= "" then out[2] = ARGV[8] end
local regs = KEYS[9] and take_waiting(9, {id})[1]
if regs then
  local how = ARGV[3] == "d" and "d" or "c"
  for wb, widx in string.gmatch(regs, "(%w+) (%d+)") do out[#out + 1] = wb .. " " .. widx .. how .. id end
end
if #out == 1 then return out end
for i = 2, #out do redis.call("ZADD", KEYS[8], at, out[i]) end
if not attrs[4] then redis.call("HSET", KEYS[1], "redjob:bout", at) end
return out
