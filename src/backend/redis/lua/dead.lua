-- Lists a queue's dead letters a page at a time by time of death, oldest or
-- newest first (ties by id, reversed for newest first). A page starts after a
-- cursor, the previous page's last row: by its rank while it is still there,
-- else after its score and id (it was requeued or deleted meanwhile; a binary
-- search among the cursor's ties, see ties_below). A page reads its rows by
-- rank, O(log N) each, never the rows before them.
-- KEYS[1]  the queue's hash (ns:q:Q): the queue must exist
-- KEYS[2]  the dead letters' sorted set (ns:q:dead)
-- KEYS[3]  the dead letters' hash (ns:q:dead:Q)
-- ARGV[1]  "asc" (oldest first) or "desc" (newest first)
-- ARGV[2]  the most rows
-- ARGV[3], ARGV[4]  the cursor's score (ms) and id; ARGV[3] is "" for the first page
-- Returns {-1} when the queue does not exist, else {now ms, then per row: id,
--         score, body, deliveries, error, priority (false where missing)}
if redis.call("HEXISTS", KEYS[1], "vt") == 0 then return {-1} end
local key, desc, want = KEYS[2], ARGV[1] == "desc", tonumber(ARGV[2])
local cs, cid = ARGV[3], ARGV[4]
local start = 0
if cs ~= "" then
  local s = redis.call("ZSCORE", key, cid)
  if s and tonumber(s) == tonumber(cs) then
    start = (desc and redis.call("ZREVRANK", key, cid) or redis.call("ZRANK", key, cid)) + 1
  else
    local below = ties_below(key, cs, cid)
    if desc then
      start = redis.call("ZCOUNT", key, "(" .. cs, "+inf") + redis.call("ZCOUNT", key, cs, cs) - below
    else
      start = redis.call("ZCOUNT", key, "-inf", "(" .. cs) + below
    end
  end
end
local now = clock()
local out = {now}
if want <= 0 then return out end
local t = redis.call(desc and "ZREVRANGE" or "ZRANGE", key, start, start + want - 1, "WITHSCORES")
local fields = {}
for j = 1, #t, 2 do
  local id = t[j]
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":n"
  fields[#fields + 1] = id .. ":err"
  fields[#fields + 1] = id .. ":p"
end
local vals = many("HMGET", KEYS[3], fields)
for j = 1, #t, 2 do
  local f = 2 * (j - 1)
  out[#out + 1] = t[j]
  out[#out + 1] = t[j + 1]
  for k = 1, 4 do out[#out + 1] = vals[f + k] end
end
return out
