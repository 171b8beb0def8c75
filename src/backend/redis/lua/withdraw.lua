-- Withdraws a worker's hand-off registration (hash field "redjob:handoff", see
-- fetch.lua), in place or waiting in line behind the one in place ("redjob:line",
-- see line_read in lib.lua): the worker's running slots filled with other jobs,
-- so it could not start a handed job at once. The next in line takes the place
-- of one withdrawn from it.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- ARGV[1]  the registration, "v3 <lease ms> <channel> <queue>"
-- Returns 1 when it was withdrawn, else 0
local f = redis.call("HMGET", KEYS[1], "redjob:handoff", "redjob:handoffs")
local queued = f[1] and f[1] ~= "" and in_line(f[2])
if f[1] == ARGV[1] then
  -- (its own entry, should it be in the line too, goes with it)
  local line = queued and line_without(line_read(1), ARGV[1])
  local reg, left
  if line then reg, left = line_next(line) end
  if reg then
    redis.call("HSET", KEYS[1], "redjob:handoff", reg, "redjob:handoffs", left, "redjob:line", line_rest(line))
  else
    redis.call("HSET", KEYS[1], "redjob:handoff", "")
  end
  return 1
end
if not queued then return 0 end
local line = line_read(1)
local kept = line_without(line, ARGV[1])
if #kept == #line then return 0 end
if #kept == 0 then
  -- the count in place, without its "+"
  redis.call("HSET", KEYS[1], "redjob:line", "", "redjob:handoffs", string.sub(f[2], 1, -2))
else
  redis.call("HSET", KEYS[1], "redjob:line", table.concat(kept, "\n"))
end
return 1
