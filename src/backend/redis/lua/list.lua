-- Lists the jobs of one state, a page at a time. Each state is a range of scores
-- (see LEASED in lib.lua): jobs are listed by priority (highest first), then by
-- score (ready: due messages oldest first, then leases that ran out). Ranges
-- only move up as time passes, so a cursor below a range starts it from its
-- beginning. Dead letters are listed by dead.lua.
-- A page starts after a cursor, the previous page's last row: at the rank after
-- its own while it is still there, else after its score and id (a binary search
-- among the rows sharing its score, see ties_below). Either way a page reads its
-- rows by rank, O(log N) each: never the rows before them.
-- KEYS[1..4], KEYS[5..24]  as job.lua
-- ARGV[1]  the state: "ready", "scheduled" or "in_flight"
-- ARGV[2]  the most rows
-- ARGV[3], ARGV[4], ARGV[5]  the cursor's priority, score and id; ARGV[4] is ""
--          for the first page
-- Returns {-1} when the queue does not exist, else {now ms, rows...} (see
--         with_fields)
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:prio")
if not attrs[1] then return {-1} end
local now = clock()
local state, want = ARGV[1], tonumber(ARGV[2])
local inf = math.huge
-- {low, low excluded, high, high excluded}
local ranges = ({
  ready = {{-inf, false, math.min(now + 1, LEASED), true}, {LEASED, false, LEASED + now + 1, true}},
  scheduled = {{now + 1, false, LEASED, true}},
  in_flight = {{LEASED + now + 1, false, inf, false}},
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
-- appends a ZRANGEBYSCORE ... WITHSCORES reply's rows at priority p
local function take(p, t)
  for j = 1, #t, 2 do rows[#rows + 1] = {p, t[j], t[j + 1]} end
end
-- the rank in `key` of the first row after the cursor (ties sort by id)
local function after_cursor(key)
  local s = redis.call("ZSCORE", key, cid)
  if s and tonumber(s) == csn then return redis.call("ZRANK", key, cid) + 1 end
  return redis.call("ZCOUNT", key, "-inf", "(" .. cs) + ties_below(key, cs, cid)
end
-- up to `left` rows of `key` at priority p from rank `from` on, while in range r
-- (ZRANGEBYSCORE's LIMIT offset would walk the rows it skips)
local function take_from(p, key, from, left, r)
  local t = redis.call("ZRANGE", key, from, from + left - 1, "WITHSCORES")
  for j = 1, #t, 2 do
    if not within(tonumber(t[j + 1]), r) then break end
    rows[#rows + 1] = {p, t[j], t[j + 1]}
  end
end
for _, level in ipairs(levels) do
  local p, key = level[1], level[2]
  -- levels above the cursor's were listed before it
  local cursor = csn and p == cp
  if not (csn and p > cp) then
    for _, r in ipairs(ranges) do
      local left = want - #rows
      if left <= 0 then break end
      local hi = bound(r[3], r[4])
      -- a cursor below this range: read it, and the next, from their start
      if cursor and (csn < r[1] or (r[2] and csn == r[1])) then cursor = false end
      if not cursor then
        take(p, redis.call("ZRANGEBYSCORE", key, bound(r[1], r[2]), hi, "WITHSCORES", "LIMIT", 0, left))
      elseif within(csn, r) then
        take_from(p, key, after_cursor(key), left, r)
        cursor = false
      end
      -- else the range lies below the cursor: listed already
    end
  end
  if #rows >= want then break end
end
local out = {now}
for _, v in ipairs(with_fields(KEYS[2], rows, ":rc")) do out[#out + 1] = v end
return out
