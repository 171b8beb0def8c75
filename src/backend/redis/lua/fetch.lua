-- Leases up to n due jobs for a worker, highest priority first; within a priority,
-- jobs whose lease ran out (their worker died) first, then due messages oldest
-- first. Each is re-scored to LEASED + now + lease (see lib.lua); the score's thousandths
-- carry the job's delivery count, so the score is also the delivery's fencing
-- token ("<lease ms>.<count, 3 digits>"). No per-message fields are written: a
-- re-delivery after a crash is counted from the score.
-- RSMQ-style receives (by RSMQ clients, or redjob's queue API) count deliveries in
-- "<id>:rc" fields; those are read only when such receives ever happened on the
-- queue, that is when "totalrecv" (every receive) differs from "redjob:leased"
-- (the fetches' share).
-- Priorities: jobs at priority 0 live in ns:q, the others in one sorted set per
-- priority (ns:q:p<n>). The hash field "redjob:prio" has a bit (priority + 10) for
-- each level a send ever used; only those levels are read. A queue without it
-- reads ns:q alone, and its caller need not pass the level keys.
-- When fewer than n were due, the worker will wait: the hash field
-- "redjob:waiting" asks the next send to wake it (see send.lua).
-- A paused queue (hash field "redjob:paused", see pause.lua) leases nothing.
-- With ARGV[3], a worker that will wait also registers for a hand-off: the next
-- send of a job due at once leases it to the worker and publishes it on the
-- worker's channel (hash field "redjob:handoff", see hand_off in lib.lua); a
-- fetch that leased all it asked for clears the registration.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3..22]  optional: the sorted sets of priorities 10..1, then -1..-10
-- ARGV[1]  the most jobs to lease
-- ARGV[2]  lease length in ms
-- ARGV[3]  optional: the worker's hand-off registration, "<lease ms> <channel>
--          <queue>" ("" or absent: none)
-- A released job (complete.lua) keeps its last lease end in "<id>:l" until it is
-- leased again: its new lease ends after that one, so no two deliveries of a job
-- ever share a token, though a release gives its delivery count back. The hash
-- field "redjob:released" counts such fields; they are read only while it is
-- not 0.
-- A job sent with a delay is due at its send's µs plus the delay (exact_due in
-- lib.lua), up to a ms before its score (rounded up): such jobs scored now + 1
-- are leased once exactly due, after every due job of their level.
-- Returns {now µs, when the earliest job left is due (Unix µs; a lease: its end) or
--          "" (only when fewer than asked were leased), lease end ms, the queue's maxsize (-1: none), due ids
--          without a body that were removed, id, body, meta, id, body, meta, ...}
--          where meta packs three integers in one: the delivery count (1..999)
--          + 1000 x (priority + 10) + 21000 x how long the job had been due (ms,
--          at most 10^11), negated when the job's lease end differs from the
--          call's (a released job's, see "<id>:l" below): that lease end (ms)
--          then follows the meta; {0, "", 0, -1, -1} when the queue does
--          not exist; {1, "", 0, -1, -2} when the queue has priorities and the
--          level keys were not passed (call again with them); {0, "", 0, -1, -3}
--          when the queue is paused
-- a missing queue costs one command (workers check it every few seconds)
local attrs = redis.call("HMGET", KEYS[2], "vt", "totalrecv", "redjob:leased", "redjob:waiting", "maxsize", "redjob:prio", "redjob:paused", "redjob:handoff",
  "redjob:released")
if not attrs[1] then return {0, "", 0, -1, -1} end
if attrs[7] then return {0, "", 0, -1, -3} end
local mask = tonumber(attrs[6]) or 0
if mask ~= 0 and #KEYS < 22 then return {1, "", 0, -1, -2} end
local levels = level_sets(mask, 3)
local now, now_us = clock()
local max = tonumber(ARGV[1])
local lease = now + tonumber(ARGV[2])
-- due ids of every level, in the order they run
local ids, scores, lv = {}, {}, {}
local left = max
for li, level in ipairs(levels) do
  for _, range in ipairs({{LEASED, lease_max(now)}, {"-inf", due_max(now)}}) do
    if left <= 0 then break end
    local due = redis.call("ZRANGEBYSCORE", level[2], range[1], range[2], "WITHSCORES", "LIMIT", 0, left)
    for j = 1, #due, 2 do
      ids[#ids + 1] = due[j]
      scores[#scores + 1] = due[j + 1]
      lv[#lv + 1] = li
    end
    left = left - #due / 2
  end
  -- jobs due exactly by now_us though scored at the next ms (see exact_due)
  if left > 0 and now + 1 < LEASED then
    local next_ms = string.format("%.0f", now + 1)
    local soon = redis.call("ZRANGEBYSCORE", level[2], next_ms, next_ms, "LIMIT", 0, 100)
    for j = 1, #soon do
      if left <= 0 then break end
      local d = exact_due(soon[j], now + 1)
      if d and d <= now_us then
        ids[#ids + 1] = soon[j]
        scores[#scores + 1] = next_ms
        lv[#lv + 1] = li
        left = left - 1
      end
    end
  end
end
local out = {now_us, "", lease, tonumber(attrs[5]) or -1, 0}
local no = 5
local n = #ids
local totalrecv = tonumber(attrs[2]) or 0
local ours = tonumber(attrs[3]) or 0
local set, leased = {}, 0
if n > 0 then
  local foreign = totalrecv ~= ours
  local per = foreign and 2 or 1
  local fields = {}
  for k = 1, n do
    if foreign then
      fields[2 * k - 1] = ids[k]
      fields[2 * k] = ids[k] .. ":rc"
    else
      fields[k] = ids[k]
    end
  end
  local vals = many("HMGET", KEYS[2], fields)
  -- released jobs' last lease ends ("<id>:l", see complete.lua): read only while
  -- the queue has some ("redjob:released" counts them), and dropped here
  local floors, nfloors = {}, 0
  local released = tonumber(attrs[9]) or 0
  if released > 0 then
    local lf = {}
    for k = 1, n do lf[k] = ids[k] .. ":l" end
    local got = many("HMGET", KEYS[2], lf)
    local drop = {}
    for k = 1, n do
      if got[k] then
        floors[k] = tonumber(got[k])
        drop[#drop + 1] = lf[k]
      end
    end
    nfloors = #drop
    if nfloors > 0 then
      allow_writes(KEYS[1])
      many("HDEL", KEYS[2], drop)
    end
  end
  local tokens = {}
  -- per level: the new scores (ZADD pairs) and the orphans
  local z, orphans = {}, {}
  local norphans = 0
  for k = 1, n do
    local id = ids[k]
    local li = lv[k]
    local body = vals[per * (k - 1) + 1]
    if body then
      local score = tonumber(scores[k])
      local due = math.floor(score)
      local count = math.floor((score - due) * 1000 + 0.5)
      -- when it became due: its score's whole ms, less LEASED for a lease that
      -- ran out (inspect's due_ms)
      if due >= LEASED then due = due - LEASED end
      local waited = now - due
      if waited < 0 then waited = 0 elseif waited > 1e11 then waited = 1e11 end
      if foreign then
        local rc = tonumber(vals[2 * k]) or 0
        if rc > count then count = rc end
      end
      count = math.min(count + 1, 999)
      local token = tokens[count]
      if not token then
        token = string.format("%d.%03d", LEASED + lease, count)
        tokens[count] = token
      end
      -- a released job's new lease ends after its last one, so that this
      -- delivery's token (lease end and count) is none of an earlier one's
      local floor = floors[k]
      local own = floor and floor >= LEASED + lease
      if own then token = string.format("%.0f.%03d", floor + 1, count) end
      local zl = z[li]
      if not zl then zl = {}; z[li] = zl end
      zl[#zl + 1] = token
      zl[#zl + 1] = id
      leased = leased + 1
      out[no + 1] = id
      out[no + 2] = body
      out[no + 3] = count + 1000 * (levels[li][1] + 10) + 21000 * waited
      no = no + 3
      if own then
        -- negative: its own lease end (ms) follows
        out[no] = -out[no]
        out[no + 1] = floor + 1 - LEASED
        no = no + 1
      end
    else
      local ol = orphans[li]
      if not ol then ol = {}; orphans[li] = ol end
      ol[#ol + 1] = id
      norphans = norphans + 1
    end
  end
  for li, ol in pairs(orphans) do drop_orphans(levels[li][2], ol) end
  out[5] = norphans
  if leased > 0 then
    if norphans == 0 then allow_writes(KEYS[1]) end
    for li, zl in pairs(z) do many("ZADD", levels[li][2], zl) end
    set = {"totalrecv", string.format("%.0f", totalrecv + leased),
           "redjob:leased", string.format("%.0f", ours + leased)}
  end
  if nfloors > 0 then
    set[#set + 1] = "redjob:released"
    set[#set + 1] = string.format("%.0f", math.max(released - nfloors, 0))
  end
end
-- fewer leased than asked (orphans count as not leased): the worker will wait
if leased < max then
  local first
  for _, level in ipairs(levels) do
    local f = redis.call("ZRANGE", level[2], 0, 0, "WITHSCORES")
    local l = redis.call("ZRANGEBYSCORE", level[2], LEASED, "+inf", "WITHSCORES", "LIMIT", 0, 1)
    -- in µs: a score's whole ms (its thousandths are a delivery count), or the
    -- first job's exact due
    for k, s in ipairs({f[2], l[2]}) do
      local score = tonumber(s)
      if score >= LEASED then score = score - LEASED end
      local due = k == 1 and exact_due(f[1], score) or math.floor(score) * 1000
      if not first or due < first then first = due end
    end
  end
  if first then out[2] = string.format("%.0f", first) end
  if attrs[4] ~= "1" then
    set[#set + 1] = "redjob:waiting"
    set[#set + 1] = "1"
  end
  local reg = ARGV[3] or ""
  if reg ~= "" and attrs[8] ~= reg then
    set[#set + 1] = "redjob:handoff"
    set[#set + 1] = reg
  end
elseif attrs[8] and attrs[8] ~= "" then
  -- a full fetch: a hand-off registration (this worker's or another's) would
  -- send the next job to a worker that may have no slot for it
  set[#set + 1] = "redjob:handoff"
  set[#set + 1] = ""
end
if #set > 0 then
  if leased == 0 then allow_writes(KEYS[1]) end
  redis.call("HSET", KEYS[2], unpack(set))
end
return out
