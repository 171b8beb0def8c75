-- Topics' length, ids and memory, and per subscriber its offset, pending
-- count, lag and consumers: one topic per key, so that one call reads a page
-- of topics (the dashboard's list, `redjob topic list`) and the caller asks
-- for each subscriber's dead letters (XLEN) in one pipeline after it. A
-- subscriber whose offset is the newest event has no lag. Any other's is
-- counted up to CAP events, and a subscriber further behind takes Redis's
-- lag when Redis knows it, else is reported as more than CAP: Redis does not
-- know it after another client deleted events ahead of the subscriber, or
-- moved it into the middle of the topic (see topic_group.lua), and Redis 7.0
-- (and other releases before the fix of redis#13958) counts events trimmed
-- ahead of a subscriber that had read before as lag still. The memory is
-- Redis's estimate from a sample of the stream's nodes (MEMORY USAGE's
-- default). Reads at most CAP + 1 events per subscriber, however long the
-- topic, and only the topics in KEYS (the caller's page of them), and only
-- the subscriber ARGV[1] names when it names one (a subscriber's own page:
-- the others' lags are not counted).
-- Bound: a call reads the subscribers of at most BUDGET (100) of them in
-- all, so at most BUDGET * (CAP + 1) events, whatever how many topics KEYS
-- names: it stops before the topic whose subscribers would go past it and
-- returns the topics read so far (the caller asks again for the rest). The
-- first topic is read whole however many subscribers it has (a topic's own
-- read: at most its subscribers * (CAP + 1) events), so that every call
-- reads one topic at least.
-- KEYS[1..] the topics' streams (ns:t:{topic}), one per topic
-- ARGV[1]   optional: the one subscriber to read (the others are left out)
-- Returns per key read, in KEYS' order (the first one at least, maybe not
--         all): {0} when the topic does not exist, else
--         {1, length, published, first, last, memory, then per subscriber
--         (the one named, if any): name, offset, pending, lag, 1 when the lag
--         is exact or 0 when there are more than it (CAP), consumers}
local CAP = 100
local BUDGET = 100
-- subscribers read so far by this call
local used = 0

-- Appends a subscriber's row (XINFO GROUPS' `g`) of the stream `key` to `out`.
local function subscriber(out, key, g, length, last)
  local row = {}
  for i = 1, #g, 2 do row[g[i]] = g[i + 1] end
  if ARGV[1] and row["name"] ~= ARGV[1] then return end
  local lag, exact = row["lag"], 1
  if row["last-delivered-id"] == last or not last then
    lag = 0
  else
    local n = #redis.call("XRANGE", key, "(" .. row["last-delivered-id"], "+", "COUNT", CAP + 1)
    if n <= CAP then
      lag = n
    elseif type(lag) ~= "number" or lag <= CAP then
      lag, exact = CAP, 0
    end
  end
  out[#out + 1] = row["name"]
  out[#out + 1] = row["last-delivered-id"]
  out[#out + 1] = row["pending"]
  out[#out + 1] = math.min(lag, length)
  out[#out + 1] = exact
  out[#out + 1] = row["consumers"]
end

-- Topic `key` read, or nil when its subscribers would take the call past
-- BUDGET (never for the call's first topic, `whole`).
local function topic(key, whole)
  if redis.call("EXISTS", key) == 0 then return {0} end
  local info = redis.call("XINFO", "STREAM", key)
  local length, added, first, last, groups = 0, 0, false, false, 0
  for i = 1, #info, 2 do
    local f, v = info[i], info[i + 1]
    if f == "length" then length = v end
    if f == "entries-added" then added = v end
    if f == "first-entry" and type(v) == "table" then first = v[1] end
    if f == "last-entry" and type(v) == "table" then last = v[1] end
    if f == "groups" then groups = v end
  end
  if ARGV[1] then groups = math.min(groups, 1) end
  if not whole and used + groups > BUDGET then return nil end
  used = used + groups
  local out = {1, length, added, first, last, redis.call("MEMORY", "USAGE", key)}
  for _, g in ipairs(redis.call("XINFO", "GROUPS", key)) do
    subscriber(out, key, g, length, last)
  end
  return out
end

local out = {}
for i = 1, #KEYS do
  local t = topic(KEYS[i], i == 1)
  if not t then break end
  out[i] = t
end
return out
