-- Requeues or deletes a subscriber's dead letters. A requeued one is appended
-- to the topic again with its type and data and a `to` field naming the
-- subscriber (the others acknowledge it unread); the topic is not trimmed.
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2]  the subscriber's dead letters (ns:t:{topic}:dead:<subscriber>)
-- ARGV[1]  the subscriber
-- ARGV[2]  "requeue" or "delete"
-- ARGV[3]  "ids", then the dead letters' ids (requeued in this order); or
--          "oldest", then how many of the oldest to take, then the id of the
--          newest one to take (a bulk action's cutoff: the last dead letter
--          when it started, so that one dead-lettered since is left)
-- Returns how many were requeued or deleted, or -1 when the subscriber does
--         not exist (a requeue only)
local key, dead, group, requeue = KEYS[1], KEYS[2], ARGV[1], ARGV[2] == "requeue"
if requeue then
  local p = redis.pcall("XPENDING", key, group)
  if type(p) == "table" and p.err then return -1 end
end
local letters = {}
if ARGV[3] == "oldest" and tonumber(ARGV[4]) > 0 then
  letters = redis.call("XRANGE", dead, "-", ARGV[5], "COUNT", tonumber(ARGV[4]))
elseif ARGV[3] == "ids" then
  for i = 4, #ARGV do
    local e = redis.call("XRANGE", dead, ARGV[i], ARGV[i])
    if e[1] then letters[#letters + 1] = e[1] end
  end
end
local n = 0
for _, e in ipairs(letters) do
  -- an id given twice is taken once
  if redis.call("XDEL", dead, e[1]) == 1 then
    n = n + 1
    if requeue then
      local f, typ, data = e[2], "", ""
      for i = 1, #f, 2 do
        if f[i] == "type" then typ = f[i + 1] end
        if f[i] == "data" then data = f[i + 1] end
      end
      redis.call("XADD", key, "*", "type", typ, "data", data, "to", group)
    end
  end
end
return n
