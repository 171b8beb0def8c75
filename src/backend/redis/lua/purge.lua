-- Deletes a batch of a queue's jobs sent before a cutoff, at any priority,
-- waiting or running (a running job's worker finds it gone at its next lease
-- renewal and drops its outcome, as after a cancel), freeing their unique keys.
-- The queue, its attributes, counters and dead letters stay. A purge calls it
-- until it has scanned every sorted set once (ZSCAN: a job there all along is
-- seen at least once, however the set changes meanwhile), so that no call holds
-- Redis long; the first call sets the cutoff, the later ones are given it. A
-- keyed job moves between the keyed set and priority 0: one promoted into a
-- place is found in priority 0, scanned after the keyed set; one that goes
-- back to wait (a holder demoted by an earlier-due job of its key, a retry, a
-- throttle), and a dead letter sent up to the cutoff requeued (or a flow's
-- parent, whose id is its flow's, sent, or a periodic job of a tick up to
-- it enqueued) into a set the
-- pass may have scanned already, is counted in the queue hash's mark
-- "redjob:purging" (see purge_mark and K.wait in lib.lua,
-- dead_requeue.lua, send.lua and periodic.lua), which holds the latest cutoff of the
-- purges that run: each call of a purge of that cutoff (or a later one, which
-- takes it over) sets it to lapse a minute later, should the purge die; a
-- purge of an earlier cutoff leaves it so, and deletes it when it ends only
-- if it is its own. While that count changed during a pass, the purge scans
-- its sets again, up to 10 passes in all: keyed jobs that go back to wait
-- (or letters requeued, parents sent, ticks enqueued) faster than a pass ends are purged as far as those
-- passes reach (a purge's work stays bounded). A job
-- counts as sent when its id says (its first ten characters, the send's µs in
-- base 36): one sent after the cutoff is left, so the purge ends even while
-- producers send.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's unique keys (ns:q:unique)
-- KEYS[4..23]  the sorted sets of priorities 10..1, then -1..-10 (ns:q:p<n>)
-- KEYS[24]  the queue's lease counts (ns:q:leases): leases leave them
-- KEYS[25]  the queue's history hash (ns:q:history:Q): the call that ends the
--          purge adds one event, "<ms> purged <count> <who>", to its field
--          "~events" (the last 100, see HistoryEvent in history.rs)
-- KEYS[26], KEYS[27]  the queue's keyed set and concurrency keys (ns:q:keyed,
--          ns:q:keys, see concurrency_keys in lib.lua): scanned first, so
--          that a keyed job promoted into a place the purge freed (sent
--          after the cutoff, or it was deleted there already) is not missed
-- KEYS[28]  the queue's wake set (ns:q:kwake, see fetch.lua)
-- KEYS[29], KEYS[30]  the queue's batch finishes and waited-for jobs
--          (ns:q:bout, ns:q:deps, see enter_removed in lib.lua): a purged job
--          of a batch, or one flows wait for, is entered there as cancelled
-- ARGV[1]  about how many members to scan
-- ARGV[2]  the cutoff: the id prefix of the latest send to delete; "" for the
--          first call, which takes Redis's clock now (a later one given is
--          taken as now)
-- ARGV[3], ARGV[4]  where the scan is: the sorted set (1 for KEYS[26], 2 for
--          KEYS[1], 3..22 for KEYS[4..23], every pass) and its ZSCAN
--          cursor; 1 and "0" for the first call
-- ARGV[5]  how many the earlier calls deleted
-- ARGV[6]  who purges ("api", "cli alice", "dashboard")
-- ARGV[7]  the history setting when the queue stores none
-- ARGV[8]  the mark's count of moves when this pass began (-1: unknown, the
--          mark lapsed or was another's of an earlier cutoff); "" for the
--          first call
-- ARGV[9]  how many passes ended ("" for the first call)
-- Returns {-1} when the queue does not exist, else {how many were deleted, the
--         cutoff, the set and cursor to go on from, the pass's count of moves,
--         how many passes ended, then the batch finishes entered}, the set 0
--         when done
local attrs = redis.call("HMGET", KEYS[2], "vt", "redjob:unique", "redjob:history", "redjob:keyed",
  "redjob:deps", "redjob:bout", "redjob:purging")
local finishes = {}
if not attrs[1] then return {-1} end
local now = clock()
local cut = ARGV[2]
local _, us = clock()
-- a cutoff given is a count's; none later than now (a job sent after this
-- call started is left however late the cutoff)
if cut == "" or cut > id_prefix(us) then cut = id_prefix(us) end
local sets = {KEYS[26], KEYS[1]}
for i = 4, 23 do sets[#sets + 1] = KEYS[i] end
-- the mark: the latest cutoff of the purges that run
local mark = purge_mark(attrs[7], now)
local start = tonumber(ARGV[8])
local passes = tonumber(ARGV[9]) or 0
-- a mark of a later cutoff counts this purge's moves too: it is left as it
-- is (its purge keeps it from lapsing, and deletes it)
local ours = not (mark and mark.cut > cut)
-- a new mark counts from the call's ms: a mark another purge set again
-- after one ended does not count as this pass's
local moves = mark and mark.moves or now
if ours then
  -- none (or it lapsed: a purge died), or another's of an earlier cutoff:
  -- moves of this purge's jobs were not all counted, a pass begun before
  -- scans again
  if start and not (mark and mark.cut == cut) then start = -1 end
  redis.call("HSET", KEYS[2], "redjob:purging", string.format("%s %.0f %.0f", cut, now + 60000, moves))
end
start = start or moves
local K = attrs[4] and concurrency_keys(26, 27, 1, now, 28)
local at, cursor = tonumber(ARGV[3]), ARGV[4]
local left, n = tonumber(ARGV[1]), 0
while at <= #sets and left > 0 do
  local r = redis.call("ZSCAN", sets[at], cursor, "COUNT", math.min(left, 1000))
  cursor = r[1]
  local rows, ids, scores = r[2], {}, {}
  local keyed = at == 1
  -- the keyed set's members: "<key>\0<19 digits><id>"
  local members = {}
  for j = 1, #rows, 2 do
    local id = rows[j]
    if keyed then
      local z = string.find(id, "\0", 1, true)
      id = z and string.sub(id, z + 20) or ""
    end
    if id ~= "" and string.sub(id, 1, 10) <= cut then
      ids[#ids + 1] = id
      members[#members + 1] = rows[j]
      scores[#scores + 1] = tonumber(rows[j + 1])
    end
  end
  left = left - math.max(#rows / 2, 1)
  -- their bodies: a batch's job, or one flows wait for, counts as cancelled
  local bodies = #ids > 0 and many("HMGET", KEYS[2], ids) or {}
  if keyed and #ids > 0 then
    many("ZREM", KEYS[26], members)
    local f = {}
    for _, id in ipairs(ids) do
      f[#f + 1] = id; f[#f + 1] = id .. ":rc"; f[#f + 1] = id .. ":fr"; f[#f + 1] = id .. ":err"
      f[#f + 1] = id .. ":a"; f[#f + 1] = id .. ":k"
    end
    many("HDEL", KEYS[2], f)
    forget_released(ids)
    n = n + #ids
  -- each was there when scanned and is deleted now: counted once
  elseif #ids > 0 then
    drop_orphans(sets[at], ids)
    many("HDEL", KEYS[2], ids)
    if attrs[2] == "1" then release_unique(KEYS[3], ids) end
    lease_counts().left(24, scores, now)
    n = n + #ids
    -- their keys' places go to the keys' next jobs
    if K and at == 2 then
      -- running jobs keep their keys' places until their leases end
      local running = {}
      for j, id in ipairs(ids) do
        if select(2, score_count(scores[j])) and math.floor(scores[j]) >= now then
          running[id] = math.floor(scores[j])
        end
      end
      K.gone(ids, running)
      K.save()
    end
  end
  if #ids > 0 then
    local had = #finishes
    enter_removed(29, 30, ids, bodies, attrs[5], attrs[6], now, finishes)
    if #finishes > had then attrs[6] = "1" end
  end
  if cursor == "0" then
    at = at + 1
    if at > #sets then
      -- a pass ends: keyed jobs that went back to wait meanwhile, and dead
      -- letters requeued, may have slipped past it: the sets are scanned
      -- again
      passes = passes + 1
      if start == moves or passes >= 10 then
        at = 0
        break
      end
      at, start = 1, moves
    end
  end
end
if at == 0 then
  if ours then redis.call("HDEL", KEYS[2], "redjob:purging") end
  if history_setting(attrs[3], ARGV[7]) then
    add_history_event(25, now, "purged", (tonumber(ARGV[5]) or 0) + n, ARGV[6])
  end
end
local out = {n, cut, at, cursor, start, passes}
for _, f in ipairs(finishes) do out[#out + 1] = f end
return out
