-- Queues that may hold batch finishes not counted yet (ns:q:bout, see
-- batches.rs): a worker marks a queue before it settles jobs of batches
-- there (again a third of its lease later), and any worker's sweep counts
-- the finishes of queues whose mark is older than a lease (their worker may
-- have died between its settle and its count), dropping the mark once the
-- queue has none left.
-- KEYS[1]  ns:{@workers}:bout: hash of queue -> when it was last marked (ms)
-- ARGV[1]  "m": mark queue ARGV[2] now; "s": list the marks older than
--          ARGV[2] ms (at most 100, from up to 10 HSCAN steps); "x": drop queue ARGV[2]'s mark if it is
--          still ARGV[3]
-- Returns  m, x: 1; s: {queue, mark, queue, mark, ...}
local now = clock()
if ARGV[1] == "m" then
  redis.call("HSET", KEYS[1], ARGV[2], string.format("%.0f", now))
  return 1
elseif ARGV[1] == "x" then
  if redis.call("HGET", KEYS[1], ARGV[2]) == ARGV[3] then redis.call("HDEL", KEYS[1], ARGV[2]) end
  return 1
end
local out = {}
local cursor, n, rounds = "0", 0, 0
repeat
  rounds = rounds + 1
  local r = redis.call("HSCAN", KEYS[1], cursor, "COUNT", 100)
  cursor = r[1]
  for i = 1, #r[2], 2 do
    if n < 100 and now - tonumber(r[2][i + 1]) > tonumber(ARGV[2]) then
      out[#out + 1] = r[2][i]
      out[#out + 1] = r[2][i + 1]
      n = n + 1
    end
  end
until cursor == "0" or n >= 100 or rounds >= 10
return out
