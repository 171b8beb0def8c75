-- Lists the jobs of one state, a page at a time. Ready jobs are a range of scores
-- (due by now, a lease that ran out included); scheduled and leased jobs share
-- the range after now, told apart by their scores' thousandths (is_lease in
-- lib.lua). Jobs are listed by priority (highest first), then by score. Ranges
-- only move up as time passes, so a cursor below a range starts it from its
-- beginning. Dead letters are listed by dead.lua.
-- A page starts after a cursor, the previous page's last row: at the rank after
-- its own while it is still there, else after its score and id (a binary search
-- among the rows sharing its score, see ties_below). Either way a page reads its
-- rows by rank, O(log N) each: never the rows before them. A page of scheduled
-- or leased jobs passes over the other kind: it reads at most ARGV[2] + 1000
-- rows, and when those run out first it ends early, its resume row the last one
-- read, so that the next page goes on from there (none when no row of the
-- range is left after it: that page is the last).
-- KEYS[1..4], KEYS[5..24]  as job.lua
-- ARGV[1]  the state: "ready", "scheduled" or "in_flight"
-- ARGV[2]  the most rows
-- ARGV[3], ARGV[4], ARGV[5]  the cursor's priority, score and id; ARGV[4] is ""
--          for the first page
-- Returns {-1} when the queue does not exist, else {now ms, resume priority,
--         resume score, resume id, rows...} (see with_fields), the resume row
--         "" when the page ends at its last row
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local state, want = ARGV[1], tonumber(ARGV[2])
local inf = math.huge
-- where jobs' and leases' scores end (see LEGACY in lib.lua)
local top = now < LEGACY and LEGACY or inf
-- {low, low excluded, high, high excluded}, and which rows of it to list
local range = ({
  ready = {-inf, false, math.min(now + 1, top), true},
  scheduled = {now + 1, false, top, true},
  in_flight = {now + 1, false, inf, false},
})[state]
-- a lease: marked, or an earlier redjob's (see LEGACY in lib.lua)
local keep = ({
  scheduled = function(x) return not select(2, score_count(x)) end,
  in_flight = function(x) return select(2, score_count(x)) or x >= top end,
})[state]
local levels = level_sets(tonumber(attrs[2]) or 0, 5)

local function bound(v, excl)
  local s = v == inf and "+inf" or v == -inf and "-inf" or string.format("%.0f", v)
  return excl and "(" .. s or s
end
local function within(x, r)
  return (x > r[1] or (not r[2] and x == r[1])) and (x < r[3] or (not r[4] and x == r[3]))
end

local cp, cs, cid = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local csn = cs ~= "" and tonumber(cs) or nil
local rows = {}
-- rows read, and the last one read when a page passes over rows; where the
-- budget ran out: {level's index, key, rank of the next row}
local budget, last, stop = want + 1000, nil, nil
-- the rank in `key` of the first row after the cursor (ties sort by id)
local function after_cursor(key)
  local s = redis.call("ZSCORE", key, cid)
  if s and tonumber(s) == csn then return redis.call("ZRANK", key, cid) + 1 end
  return redis.call("ZCOUNT", key, "-inf", "(" .. cs) + ties_below(key, cs, cid)
end
-- rows of `key` at priority p from rank `from` on, while in range r, until the
-- page is full or the budget spent (ZRANGEBYSCORE's LIMIT offset would walk the
-- rows it skips)
local function take_from(li, p, key, from)
  while #rows < want and budget > 0 do
    local n = keep and math.min(budget, 100) or want - #rows
    local t = redis.call("ZRANGE", key, from, from + n - 1, "WITHSCORES")
    for j = 1, #t, 2 do
      local x = tonumber(t[j + 1])
      if not within(x, range) then return end
      budget = budget - 1
      if not keep or keep(x) then
        rows[#rows + 1] = {p, t[j], t[j + 1]}
        if #rows >= want then return end
      end
      -- an id no RSMQ client writes cannot be a cursor (the reader skips it)
      if #t[j] == 32 and not string.find(t[j], "[^%w:]") then last = {p, t[j], t[j + 1]} end
      if budget <= 0 then
        stop = {li, key, from + (j + 1) / 2}
        return
      end
    end
    if #t < 2 * n then return end
    from = from + n
  end
end
for li, level in ipairs(levels) do
  local p, key = level[1], level[2]
  -- levels above the cursor's were listed before it; a cursor below the range
  -- starts it from its beginning
  if not (csn and p > cp) then
    local from
    if csn and p == cp and within(csn, range) then
      from = after_cursor(key)
    elseif not (csn and p == cp and csn >= range[3]) then
      from = range[1] == -inf and 0 or redis.call("ZCOUNT", key, "-inf", bound(range[1], not range[2]))
    end
    if from then take_from(li, p, key, from) end
  end
  if #rows >= want or budget <= 0 then break end
end
-- whether the range holds a row after where the budget ran out (one read,
-- and a count per lower level): else the page that ended there is the last
local function more_after(s)
  local t = redis.call("ZRANGE", s[2], s[3], s[3], "WITHSCORES")
  if #t > 0 and within(tonumber(t[2]), range) then return true end
  local low, high = bound(range[1], range[2]), bound(range[3], range[4])
  for i = s[1] + 1, #levels do
    if redis.call("ZCOUNT", levels[i][2], low, high) > 0 then return true end
  end
  return false
end
local out = {now, "", "", ""}
-- the page ended early, on rows it passed over: go on after the last read
if keep and #rows < want and budget <= 0 and last and stop and more_after(stop) then
  out[2], out[3], out[4] = tostring(last[1]), last[3], last[2]
end
for _, v in ipairs(with_fields(KEYS[2], rows, ":rc")) do out[#out + 1] = v end
return out
