-- Receives up to n due messages exactly as RSMQ's receiveMessage does: each is
-- hidden until now + vt, its receive count bumped and its first receive time set.
-- The score's thousandths (a redjob delivery count, as of a retry) are kept, as
-- visibility.lua keeps them: a receive never resets the count that guards
-- against crash loops (RSMQ clients read whole ms).
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique, see unique.lua): a due message
--          found without a body (an orphan, dropped) frees its key, as in a
--          fetch, while the queue has unique keys (hash field "redjob:unique")
-- ARGV[1]  the most messages to receive
-- ARGV[2]  visibility timeout in ms, or "" for the queue's vt
-- Returns {-1} when the queue does not exist, else {1, id, body, rc, fr, ...}
local qvt = redis.call("HGET", KEYS[2], "vt")
if not qvt then return {-1} end
local vt = tonumber(qvt) * 1000
if ARGV[2] ~= "" then vt = tonumber(ARGV[2]) end
local now = clock()
local found = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", due_max(now), "WITHSCORES", "LIMIT", 0, tonumber(ARGV[1]))
local out = {1}
if #found == 0 then return out end
local ids, counts = {}, {}
for i = 1, #found, 2 do
  ids[#ids + 1] = found[i]
  counts[#ids] = score_count(tonumber(found[i + 1]))
end
local bodies = many("HMGET", KEYS[2], ids)
local z, orphans = {}, {}
local hidden = now + vt
for i, id in ipairs(ids) do
  if bodies[i] then
    z[#z + 1] = counts[i] > 0 and string.format("%d.%03d", hidden, counts[i]) or string.format("%.0f", hidden)
    z[#z + 1] = id
  else
    orphans[#orphans + 1] = id
  end
end
-- a member without a body carries nothing to deliver: drop it, with its
-- unique key (at most the batch asked for)
if #orphans > 0 then
  local ukey = KEYS[3] and redis.call("HEXISTS", KEYS[2], "redjob:unique") == 1 and KEYS[3] or nil
  drop_orphans(KEYS[1], orphans, ukey)
end
if #z == 0 then return out end
many("ZADD", KEYS[1], z)
redis.call("HINCRBY", KEYS[2], "totalrecv", #z / 2)
for i, id in ipairs(ids) do
  if bodies[i] then
    local rc = redis.call("HINCRBY", KEYS[2], id .. ":rc", 1)
    local fr
    if rc == 1 then
      fr = now
      redis.call("HSET", KEYS[2], id .. ":fr", now)
    else
      fr = tonumber(redis.call("HGET", KEYS[2], id .. ":fr")) or now
    end
    out[#out + 1] = id
    out[#out + 1] = bodies[i]
    out[#out + 1] = rc
    out[#out + 1] = fr
  end
end
return out
