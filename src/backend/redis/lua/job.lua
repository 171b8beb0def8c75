-- Looks one job up by id: in the queue at any priority, or in its dead letters.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  dead letters' sorted set (ns:q:dead)
-- KEYS[4]  dead letters' hash (ns:q:dead:Q)
-- KEYS[5..24]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- ARGV[1]  the id
-- Returns {-1} when the queue does not exist; {now ms} when the job is in
--         neither; else {now ms, where, attempt records, priority, id, score,
--         body, count, error} (see with_fields): where is "q" in the queue
--         (count: its rc field) or "d" dead (score: when it died; count: its
--         deliveries; priority: the one it had); the attempt records are the
--         "<id>:a" field (see append_attempt in lib.lua) or false
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local id = ARGV[1]
local out = {now}
local level, s = find_level(tonumber(attrs[2]) or 0, 5, id)
if level then
  out[2] = "q"
  out[3] = redis.call("HGET", KEYS[2], id .. ":a")
  for _, v in ipairs(with_fields(KEYS[2], {{level[1], id, s}}, ":rc")) do out[#out + 1] = v end
  return out
end
local d = redis.call("ZSCORE", KEYS[3], id)
if d then
  out[2] = "d"
  out[3] = redis.call("HGET", KEYS[4], id .. ":a")
  local p = tonumber(redis.call("HGET", KEYS[4], id .. ":p")) or 0
  for _, v in ipairs(with_fields(KEYS[4], {{p, id, d}}, ":n")) do out[#out + 1] = v end
end
return out
