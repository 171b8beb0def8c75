-- Queues that may hold batch finishes not counted yet (ns:q:bout, see
-- batches.rs), and batches whose callbacks fell due when they were sealed.
-- A worker marks a queue before it settles jobs of batches there, until its
-- own lease ends from now (again a third of its lease later): while the mark
-- stands its worker counts those finishes itself. Any worker's sweep counts
-- the finishes of queues whose marks ran out (their worker may have died
-- between its settle and its count), dropping a mark once its queue has
-- none left; and sends the callbacks of batches a sealer left due.
-- KEYS[1]  ns:{@workers}:bout: sorted set of queues by when their mark runs
--          out (ms)
-- KEYS[2]  ns:{@workers}:bdue: sorted set of batch ids whose sealer may not
--          have sent their due callbacks, by when it recorded them (ms)
-- ARGV[1]  "m": mark queue ARGV[2] until ARGV[3] ms from now (a later mark
--          stands); "s": list up to 100 marks that ran out, then up to 100
--          batches recorded over ARGV[2] ms ago; "x": drop queue ARGV[2]'s
--          mark if it is still ARGV[3]; "d": record batch ARGV[2]; "y": drop
--          batch ARGV[2]
-- Returns  s: {n, n x (queue, mark), batch ids...}; otherwise 1
local now = clock()
local what = ARGV[1]
if what == "m" then
  redis.call("ZADD", KEYS[1], "GT", string.format("%.0f", now + tonumber(ARGV[3])), ARGV[2])
  return 1
elseif what == "x" then
  if redis.call("ZSCORE", KEYS[1], ARGV[2]) == ARGV[3] then redis.call("ZREM", KEYS[1], ARGV[2]) end
  return 1
elseif what == "d" then
  redis.call("ZADD", KEYS[2], string.format("%.0f", now), ARGV[2])
  return 1
elseif what == "y" then
  redis.call("ZREM", KEYS[2], ARGV[2])
  return 1
end
local marks = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", string.format("(%.0f", now), "WITHSCORES", "LIMIT", 0, 100)
local out = {#marks / 2}
for _, v in ipairs(marks) do out[#out + 1] = v end
local due = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", string.format("%.0f", now - tonumber(ARGV[2])), "LIMIT", 0, 100)
for _, v in ipairs(due) do out[#out + 1] = v end
return out
