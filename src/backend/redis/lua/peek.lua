-- The next jobs that would run, without leasing them: the due ones in the order a
-- fetch takes them (see fetch.lua), then the scheduled ones by due time (at one
-- time, highest priority first). Leased jobs are not listed until their lease
-- runs out: each level reads at most ARGV[1] + 1000 rows after now, passing
-- over the leases among them.
-- KEYS[1..4], KEYS[5..24]  as job.lua
-- ARGV[1]  the most rows
-- Returns {-1} when the queue does not exist, else {now ms, rows...} (see with_fields)
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local want = tonumber(ARGV[1])
local levels = level_sets(tonumber(attrs[2]) or 0, 5)
local rows = {}
for _, level in ipairs(levels) do
  local left = want - #rows
  if left > 0 then
    local t = redis.call("ZRANGEBYSCORE", level[2], "-inf", due_max(now), "WITHSCORES", "LIMIT", 0, left)
    for j = 1, #t, 2 do rows[#rows + 1] = {level[1], t[j], t[j + 1]} end
  end
end
local left = want - #rows
if left > 0 then
  local later = {}
  for li, level in ipairs(levels) do
    local from, budget, got = redis.call("ZCOUNT", level[2], "-inf", string.format("(%.0f", now + 1)), left + 1000, 0
    while got < left and budget > 0 do
      local n = math.min(budget, 100)
      local t = redis.call("ZRANGE", level[2], from, from + n - 1, "WITHSCORES")
      for j = 1, #t, 2 do
        local x = tonumber(t[j + 1])
        if now < LEGACY and x >= LEGACY then budget = 0; break end
        if not select(2, score_count(x)) and got < left then
          later[#later + 1] = {level[1], t[j], t[j + 1], li, x}
          got = got + 1
        end
      end
      budget = budget - n
      if #t < 2 * n then break end
      from = from + n
    end
  end
  -- by due ms (a retry's thousandths count its deliveries), then priority,
  -- then as a fetch takes a level's: by score, then id
  table.sort(later, function(a, b)
    local x, y = math.floor(a[5]), math.floor(b[5])
    if x ~= y then return x < y end
    if a[4] ~= b[4] then return a[4] < b[4] end
    if a[5] ~= b[5] then return a[5] < b[5] end
    return a[2] < b[2]
  end)
  for i = 1, math.min(left, #later) do rows[#rows + 1] = later[i] end
end
local out = {now}
for _, v in ipairs(with_fields(KEYS[2], rows, ":rc")) do out[#out + 1] = v end
return out
