-- The worker's fallback poll of one queue with priorities (queues without run
-- plain commands, see poll.rs): whether a job is due, or a lease ends, within
-- ARGV[1] ms, at any priority in use.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..22]  the sorted sets of priorities 10..1, then -1..-10
-- ARGV[1]  the window, ms
-- Returns 1 when something is due or a lease ends within the window, else 0
local mask = tonumber(redis.call("HGET", KEYS[2], "redjob:prio")) or 0
local now = clock()
local soon = now + tonumber(ARGV[1])
for _, level in ipairs(level_sets(mask, 3)) do
  -- a lease is scored at its end, so a lease ending in the window is "due" too
  if #redis.call("ZRANGEBYSCORE", level[2], "-inf", due_max(soon), "LIMIT", 0, 1) > 0 then return 1 end
  -- a lease an earlier redjob wrote (see LEGACY in lib.lua) that ends in it
  if now < LEGACY then
    local ends = string.format("(%.0f", LEGACY + soon + 1)
    if #redis.call("ZRANGEBYSCORE", level[2], LEGACY, ends, "LIMIT", 0, 1) > 0 then return 1 end
  end
end
return 0
