-- Leases up to n due jobs for a worker, highest priority first; within a priority,
-- oldest due first (a job whose lease ran out, its worker dead, is due from its
-- lease end). Each is re-scored to its lease end, now + lease, with 500 + its
-- delivery count in the thousandths (LEASE_MARK in lib.lua), so the score is
-- also the delivery's fencing token ("<lease end ms>.<5xx>"), and an RSMQ client
-- sees the job again once the lease runs out. No per-message fields are written:
-- a re-delivery after a crash is counted from the score. A job whose lease ran
-- out gets an attempt record for that delivery ("<id>:a", see append_attempt in
-- lib.lua): outcome lease_lost, with when its lease ended; its start, end and
-- worker are unknown. The leases are counted
-- by the second they end in (KEYS[3], see lease_counts in lib.lua).
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
-- Limits across the fleet (the queue's settings "redjob:concurrency" and
-- "redjob:rate", see fleet_limits in lib.lua) cap what a fetch leases: a
-- global concurrency N leases only while fewer than N leases are in flight
-- (the lease counts, KEYS[3]: a lease takes a place until it is settled or
-- the second it ends in has passed); a rate of N per period only while fewer
-- than N leases began in the period up to now, each start kept in KEYS[5]
-- (member "<id> <token>", score its ms; the key expires a period after the
-- last). A fetch that a limit held back (it leased fewer than asked and no
-- place is left) neither waits for a send nor registers for a hand-off: it
-- returns when the limit next lets a job start, and, for the concurrency,
-- sets the hash field "redjob:held" so that a settle that frees a place
-- wakes the queue's workers (see complete.lua). A handler's throttle (hash
-- field "redjob:throttled", until when in ms, see complete.lua) holds the
-- queue the same way until it ends; it is apart from a pause.
-- With ARGV[3], a worker that will wait also registers for a hand-off: the next
-- sends of jobs due at once lease them to the worker and publish them on the
-- worker's channel (hash field "redjob:handoff", see hand_off in lib.lua), as
-- many as the hash field "redjob:handoffs" says for a "v3" registration
-- (ARGV[4], at most HANDS_MAX, less what this fetch leased, at least one;
-- each hand-off counts it down, the last clears the registration); a fetch
-- that leased all it asked for clears the registration. While another
-- worker's registration is in place (and its worker listens), the worker
-- waits in line behind it instead (hash field "redjob:line", see line_read in
-- lib.lua), where a send finds it when that one is used up.
-- KEYS[1]  the queue's sorted set (ns:q): priority 0
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's lease counts (ns:q:leases)
-- KEYS[4]  the queue's exact dues (ns:q:exact, see index_exact in lib.lua)
-- KEYS[5]  the queue's starts under a rate limit (ns:q:starts)
-- KEYS[6]  the queue's keyed set (ns:q:keyed, see concurrency_keys in lib.lua):
--          while it holds jobs, a fetch that will wait names the first second
--          of ten (when idle fetches sweep the keys) a minute on as due at the
--          latest
-- KEYS[7]  the queue's concurrency keys (ns:q:keys)
-- KEYS[8]  the queue's wake set (ns:q:kwake): keys whose places free at a
--          time (a deleted running job's lease end, a key's throttle end),
--          scored by it: a fetch fills the keys due (10 a call) before it
--          reads, and a worker that waits wakes at the first
-- KEYS[9]  the queue's unique keys (ns:q:unique, see unique.lua): a due job
--          found without a body (an orphan, dropped) frees its key; idle
--          fetches sweep the keys of jobs that are gone (sweep_unique in
--          lib.lua), while the queue had unique keys (hash field "redjob:unique")
-- KEYS[10..29]  optional: the sorted sets of priorities 10..1, then -1..-10
-- ARGV[1]  the most jobs to lease
-- ARGV[2]  lease length in ms
-- ARGV[3]  optional: the worker's hand-off registration, "v3 <lease ms> <channel>
--          <queue>" ("" or absent: none)
-- ARGV[4]  optional: how many jobs the worker can start at once, of which the
--          registration takes what this fetch did not lease (absent: one)
-- A released job (complete.lua) keeps its last lease end in "<id>:l" until it is
-- leased again: its new lease ends after that one, so no two deliveries of a job
-- share a token, though a release gives its delivery count back. The hash
-- field "redjob:released" counts such fields; they are read only while it is
-- not 0. One an RSMQ client's deleteMessage left (its job gone) is dropped,
-- and counted out, by the idle fetches' sweep of leftover fields.
-- A job sent with a delay is due at its send's µs plus the delay (exact_due in
-- lib.lua), up to a ms before its score (rounded up): such jobs scored now + 1
-- are leased once exactly due, after every due job of their level; the send
-- keeps their exact dues in KEYS[4], so however many jobs share their ms, a
-- fetch reads only the dues that passed, and drops those of the jobs it takes
-- so (a job released back to its send's score is due at that score).
-- Returns {now µs, when the earliest job left is due (Unix µs; a lease: its end),
--          or when a limit that held the fetch back lets a job start, or ""
--          (only when fewer than asked were leased), lease end ms, the queue's
--          maxsize (-1: none), due ids without a body that were removed, the
--          limits that held the fetch back (1: the concurrency, + 2: the rate,
--          + 4: a throttle; 0: none; + 8: batch finishes wait too long, see
--          complete.lua; + 16 x the due jobs they kept from the fetch, at
--          most what it asked for less what it leased), then the leased jobs
--          in groups: meta, n, n x (id,
--          body), ...}, where meta packs three integers in one, the same for
--          each job of its group: the delivery count (1..499) + 1000 x
--          (priority + 10) + 21000 x how long the job had been due (ms, at
--          most 10^11), negated when the job's lease end differs from the
--          call's (a released job's, see "<id>:l" below): that lease end (ms)
--          then follows the meta. Consecutive jobs due at one score form one
--          group (a backlog sent in one ms: one meta for all), so a job costs
--          no arithmetic of its own, unless something differs per job: a
--          lost lease, a released job's own lease end, a job held back by its
--          key, a count from RSMQ-style receives (each is a group of its own); {0, "", 0, -1, -1, 0} when the queue does
--          not exist; {1, "", 0, -1, -2, 0} when the queue has priorities and the
--          level keys were not passed (call again with them); {0, "", 0, -1, -3, 0}
--          when the queue is paused; {1, "", 0, -1, -4, 0} when the hash field
--          "redjob:waiting" is missing or "+" (an RSMQ client made the queue:
--          run adopt.lua, then call again)
-- a missing queue costs one command (workers check it every few seconds)
-- (globals read in the per-job loop, as locals)
local tonumber, floor = tonumber, math.floor
local attrs = redis.call("HMGET", KEYS[2], "vt", "totalrecv", "redjob:leased", "redjob:waiting", "maxsize", "redjob:prio", "redjob:paused", "redjob:handoff",
  "redjob:released", "redjob:exact", "redjob:current", "redjob:errors", "redjob:sweep", "redjob:concurrency",
  "redjob:rate", "redjob:held", "redjob:throttled", "redjob:keyed", "redjob:ksweep", "redjob:bout",
  "redjob:purging")
if not attrs[1] then return {0, "", 0, -1, -1, 0} end
-- a queue an RSMQ client made: what its deleteQueue of the name may have left
-- is picked up first, once (see adopt.lua)
if not attrs[4] or attrs[4] == "+" then return {1, "", 0, -1, -4, 0} end
if attrs[7] then return {0, "", 0, -1, -3, 0} end
local mask = tonumber(attrs[6]) or 0
if mask ~= 0 and #KEYS < 29 then return {1, "", 0, -1, -2, 0} end
local levels = level_sets(mask, 10)
local now, now_us = clock()
-- keys whose places freed by now (see KEYS[8]) give them to their waiting jobs
if attrs[18] then
  local due = redis.call("ZRANGEBYSCORE", KEYS[8], "-inf", string.format("%.0f", now), "LIMIT", 0, 10)
  if #due > 0 then
    local K = concurrency_keys(6, 7, 1, now, 8)
    many("ZREM", KEYS[8], due)
    -- a key with a later event (another ghost, a throttle) is entered again
    for _, key in ipairs(due) do
      K.fill(key)
      K.rewake(key)
    end
    K.save()
  end
end
local asked = tonumber(ARGV[1])
local max = asked
local lease = now + tonumber(ARGV[2])
-- the limits across the fleet: what may start now
local limited, global, rate_n, rate_ms = fleet_limits(attrs[14], attrs[15])
local inflight, rate_used = 0, 0
if global > 0 then
  local n, this = lease_counts().after(3, now)
  inflight = n + this
  max = math.min(max, math.max(global - inflight, 0))
end
if rate_n > 0 then
  rate_used = redis.call("ZCOUNT", KEYS[5], string.format("(%.0f", now - rate_ms), "+inf")
  max = math.min(max, math.max(rate_n - rate_used, 0))
end
-- a handler's throttle (see complete.lua) holds the queue until it ends
local throttled = throttle_end(attrs[17], now)
if throttled > 0 then max = 0 end
-- the exact dues (KEYS[4], see index_exact in lib.lua) that passed in this ms
-- by now_us: their jobs may be scored at the next ms; dues of an earlier ms are
-- due by their scores, and up to 100 of them are dropped per call
local exact, taken, took, ntaken = {}, {}, {}, 0
if attrs[10] and now + 1 <= LAST_DUE then
  local ms = string.format("%.0f", now * 1000)
  exact = redis.call("ZRANGEBYSCORE", KEYS[4], "(" .. ms, string.format("%.0f", now_us), "LIMIT", 0, 100)
  local old = redis.call("ZRANGEBYSCORE", KEYS[4], "-inf", ms, "LIMIT", 0, 100)
  if #old > 0 then
    allow_writes(KEYS[1])
    many("ZREM", KEYS[4], old)
  end
end
-- due ids of every level, in the order they run (n of them: a count, as `#t`
-- searches the table on every append); level li's are ids[upto[li - 1] + 1 ..
-- upto[li]]
local ids, scores, upto = {}, {}, {}
local n = 0
local left = max
-- leases an earlier redjob wrote (see LEGACY in lib.lua) are looked for until a
-- fetch finds none left at any level: then the hash field "redjob:current" says
-- so (earlier workers are stopped before these start; see docs/handlers.md)
local legacy = now < LEGACY and not attrs[11]
local legacy_left = false
for li, level in ipairs(levels) do
  -- up to 10 that ran out become due at their end, with their count, before
  -- this level is read
  if legacy then
    if #redis.call("ZRANGEBYSCORE", level[2], LEGACY, "+inf", "LIMIT", 0, 1) > 0 then legacy_left = true end
    local old = redis.call("ZRANGEBYSCORE", level[2], LEGACY, string.format("(%.0f", LEGACY + now + 1), "WITHSCORES", "LIMIT", 0, 10)
    if #old > 0 then
      local back = {}
      for j = 1, #old, 2 do
        local s = tonumber(old[j + 1])
        back[#back + 1] = string.format("%.0f.%03d", math.floor(s) - LEGACY, math.min(math.floor((s - math.floor(s)) * 1000 + 0.5), MAX_COUNT))
        back[#back + 1] = old[j]
      end
      allow_writes(KEYS[1])
      many("ZADD", level[2], back)
    end
  end
  if left > 0 then
    local due = redis.call("ZRANGEBYSCORE", level[2], "-inf", due_max(now), "WITHSCORES", "LIMIT", 0, left)
    for j = 1, #due, 2 do
      n = n + 1
      ids[n] = due[j]
      scores[n] = due[j + 1]
    end
    left = left - #due / 2
  end
  -- jobs due exactly by now_us though scored at the next ms (see exact_due):
  -- the exact dues that passed, still at that score at this level
  if left > 0 and #exact > 0 then
    local at = many("ZMSCORE", level[2], exact)
    for j = 1, #exact do
      if left <= 0 then break end
      if at[j] and tonumber(at[j]) == now + 1 and not taken[exact[j]] then
        taken[exact[j]] = true
        ntaken = ntaken + 1
        took[ntaken] = exact[j]
        n = n + 1
        ids[n] = exact[j]
        scores[n] = at[j]
        left = left - 1
      end
    end
  end
  upto[li] = n
end
-- the exact dues of the jobs taken through them go now, as a lease drops
-- one in memory: a job released at delivery 1 (its count given back) with
-- a 1 ms delay in this ms is back at its send's score, due at that ms, not
-- at once through its exact due (one ZREM, only when some were taken so)
if ntaken > 0 then
  allow_writes(KEYS[1])
  many("ZREM", KEYS[4], took)
end
local out = {now_us, "", lease, tonumber(attrs[5]) or -1, 0, 0}
-- batch finishes a settle entered (ns:q:bout, see complete.lua) that wait
-- longer than a lease (at least 5 s): their worker died before its batches
-- counted them (+ 8)
if attrs[20] and now - tonumber(attrs[20]) > math.max(5000, tonumber(ARGV[2])) then out[6] = 8 end
local set = {}
if legacy and not legacy_left then
  set[#set + 1] = "redjob:current"
  set[#set + 1] = "1"
end
local no = 6
local totalrecv = tonumber(attrs[2]) or 0
local ours = tonumber(attrs[3]) or 0
local leased = 0
-- how many "<id>:l" fields are left (see "redjob:released"): written at the
-- end when a fetch dropped some
local released_was = tonumber(attrs[9]) or 0
local released_now = released_was
-- the starts a rate limit counts: ZADD pairs
local starts = {}
if n > 0 then
  local foreign = totalrecv ~= ours
  local per = foreign and 2 or 1
  -- the bodies (with each "<id>:rc" after its body when foreign)
  local fields = ids
  if foreign then
    fields = {}
    for k = 1, n do
      fields[2 * k - 1] = ids[k]
      fields[2 * k] = ids[k] .. ":rc"
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
        -- kept by an earlier redjob's release: LEGACY + its lease end
        if floors[k] >= LEGACY and now < LEGACY then floors[k] = floors[k] - LEGACY end
        drop[#drop + 1] = lf[k]
      end
    end
    nfloors = #drop
    if nfloors > 0 then
      allow_writes(KEYS[1])
      many("HDEL", KEYS[2], drop)
    end
  end
  -- keyed jobs whose lease ran out while a handler throttled their key wait
  -- for the throttle's end rather than run again (see K.throttle in lib.lua)
  local KT, held_back = nil, {}
  if attrs[18] then
    local exp, kf = {}, {}
    -- (priority 0's entries)
    local from = 1
    for li, level in ipairs(levels) do
      if level[1] == 0 then
        for k = from, upto[li] do
          if select(2, score_count(tonumber(scores[k]))) then
            exp[#exp + 1] = k
            kf[#kf + 1] = ids[k] .. ":k"
          end
        end
      end
      from = upto[li] + 1
    end
    if #exp > 0 then
      local kv = many("HMGET", KEYS[2], kf)
      for j, k in ipairs(exp) do
        if kv[j] then
          if not KT then
            KT = concurrency_keys(6, 7, 1, now, 8)
            KT.mark = attrs[21]
          end
          local key = string.sub(kv[j], 20)
          if (KT.get(key).until_ms or 0) > now then held_back[k] = key end
        end
      end
    end
  end
  local tokens = {}
  -- how many leases end when (ms), for the lease counts: `fresh` of them at
  -- the call's lease end
  local ends, fresh = {}, 0
  -- per level: the new scores (ZADD pairs) and the orphans
  local z, orphans = {}, {}
  -- jobs whose lease ran out, and their lost attempt's record
  local lost, lost_recs = {}, {}
  local norphans = 0
  -- each score's due ms and deliveries, parsed once a call (jobs due in one
  -- ms share a score)
  local dues, counts = {}, {}
  local any_floors, any_held = nfloors > 0, next(held_back) ~= nil
  -- a job may join the group of the job before it, unread, when both came
  -- with the same score and nothing about them differs per job
  local simple = not foreign and not any_floors and not any_held
  local from = 1
  for li, level in ipairs(levels) do
    local lbase = 1000 * (level[1] + 10)
    local zl, zc = {}, 0
    -- the open group: the score its jobs share (nil: none that others may
    -- join), its token, where its count goes in out, and the count
    local gsc, gtok, gat, gn = nil, nil, 0, 0
    for k = from, upto[li] do
      local id = ids[k]
      local body = vals[per * (k - 1) + 1]
      if body then
        local sc = scores[k]
        if sc == gsc then
          -- one more job of the open group: its token, count and wait
          zc = zc + 2
          zl[zc - 1] = gtok
          zl[zc] = id
          out[no + 1] = id
          out[no + 2] = body
          no = no + 2
          gn = gn + 1
          fresh = fresh + 1
          leased = leased + 1
          if rate_n > 0 then
            starts[#starts + 1] = now
            starts[#starts + 1] = id .. " " .. gtok
          end
        else
          -- when it became due: its score's whole ms (a lease that ran out:
          -- its end), and its deliveries: its thousandths
          local due, count = dues[sc], nil
          if due then
            count = counts[sc]
          else
            local score = tonumber(sc)
            due = floor(score)
            count = floor((score - due) * 1000 + 0.5)
            dues[sc], counts[sc] = due, count
          end
          -- a lease that ran out leaves the lease counts (see score_count)
          local was_lease = count >= LEASE_MARK
          if was_lease then
            count = count - LEASE_MARK
            ends[due] = (ends[due] or 0) - 1
            lost[#lost + 1] = id
            lost_recs[#lost_recs + 1] = string.format('{"n":%d,"lease_end":%.0f,"outcome":"lease_lost"}', count, due)
          end
          if any_held and held_back[k] then
            -- due at its lease end with its deliveries, waiting for its key
            KT.demote(held_back[k], due + count / 1000, id)
          else
            local waited = now - due
            if waited < 0 then waited = 0 elseif waited > 1e11 then waited = 1e11 end
            if foreign then
              local rc = tonumber(vals[2 * k]) or 0
              if rc > count then count = rc end
            end
            count = count + 1
            if count > MAX_COUNT then count = MAX_COUNT end
            local token = tokens[count]
            if not token then
              token = lease_score(lease, count)
              tokens[count] = token
            end
            -- a released job's new lease ends after its last one, so that
            -- this delivery's token (lease end and count) is none of an
            -- earlier one's
            local last = any_floors and floors[k]
            local own = last and last >= lease
            if own then
              token = lease_score(last + 1, count)
              ends[last + 1] = (ends[last + 1] or 0) + 1
            else
              fresh = fresh + 1
            end
            zc = zc + 2
            zl[zc - 1] = token
            zl[zc] = id
            if rate_n > 0 then
              starts[#starts + 1] = now
              starts[#starts + 1] = id .. " " .. token
            end
            leased = leased + 1
            -- a group of its own: meta (negated, then the lease end, for its
            -- own lease), the count, then the jobs
            if gat > 0 then out[gat] = gn end
            local meta = count + lbase + 21000 * waited
            if own then
              out[no + 1] = -meta
              out[no + 2] = last + 1
              no = no + 2
            else
              out[no + 1] = meta
              no = no + 1
            end
            gat, gn = no + 1, 1
            out[no + 2] = id
            out[no + 3] = body
            no = no + 3
            gsc, gtok = nil, token
            if simple and not was_lease then gsc = sc end
          end
        end
      else
        if gat > 0 then out[gat] = gn; gat, gsc = 0, nil end
        local ol = orphans[li]
        if not ol then ol = {}; orphans[li] = ol end
        ol[#ol + 1] = id
        norphans = norphans + 1
      end
    end
    if gat > 0 then out[gat] = gn end
    if zc > 0 then z[li] = zl end
    from = upto[li] + 1
  end
  if KT then KT.save() end
  if norphans > 0 then
    -- their unique keys go with them, while the queue has unique keys
    local ukey = redis.call("HEXISTS", KEYS[2], "redjob:unique") == 1 and KEYS[9] or nil
    for li, ol in pairs(orphans) do drop_orphans(levels[li][2], ol, ukey) end
  end
  out[5] = norphans
  if #lost > 0 then
    local af = {}
    for j, id in ipairs(lost) do af[j] = id .. ":a" end
    local old = many("HMGET", KEYS[2], af)
    for j = 1, #lost do
      set[#set + 1] = af[j]
      set[#set + 1] = append_attempt(old[j], lost_recs[j])
    end
    set[#set + 1] = "redjob:errors"
    set[#set + 1] = "1"
  end
  if leased > 0 then
    if norphans == 0 then allow_writes(KEYS[1]) end
    for li, zl in pairs(z) do many("ZADD", levels[li][2], zl) end
    ends[lease] = (ends[lease] or 0) + fresh
    lease_counts().changes(3, ends, now)
    set[#set + 1] = "totalrecv"
    set[#set + 1] = totalrecv + leased
    set[#set + 1] = "redjob:leased"
    set[#set + 1] = ours + leased
    if #starts > 0 then
      many("ZADD", KEYS[5], starts)
      -- the starts out of the window go, at most this call's and 100 more (the
      -- window then holds no more than the limit's N and these); by ZRANGE and
      -- ZREM, which the worker ACL rule of earlier releases grants
      local card = redis.call("ZCARD", KEYS[5])
      local stale = math.min(card - rate_used - leased, leased + 100)
      if stale > 0 then many("ZREM", KEYS[5], redis.call("ZRANGE", KEYS[5], 0, stale - 1)) end
      redis.call("PEXPIRE", KEYS[5], rate_ms)
    end
  elseif next(ends) then
    -- leases that ran out, held back for their keys' throttles
    lease_counts().changes(3, ends, now)
  end
  if nfloors > 0 then released_now = math.max(released_now - nfloors, 0) end
end
-- a limit held the fetch back: it leased fewer than asked and left no place
local global_full = global > 0 and global - inflight - leased <= 0
local rate_full = rate_n > 0 and rate_n - rate_used - leased <= 0
if leased < asked and (global_full or rate_full or throttled > 0) then
  -- when the limit lets the next job start (ms): a place frees when the second
  -- in which the first lease in flight ends has passed (or sooner, by a settle,
  -- which wakes the workers: "redjob:held"); a start leaves the window a
  -- period after it began. Both full: the later.
  local at = 0
  if global_full then
    local _, _, first_s = lease_counts().after(3, now)
    at = ((first_s or math.floor(now / 1000)) + 1) * 1000
    if attrs[16] ~= "1" then
      set[#set + 1] = "redjob:held"
      set[#set + 1] = "1"
    end
  end
  if rate_full then
    local o = redis.call("ZRANGEBYSCORE", KEYS[5], string.format("(%.0f", now - rate_ms), "+inf", "WITHSCORES", "LIMIT", 0, 1)
    at = math.max(at, (tonumber(o[2]) or now) + rate_ms)
  end
  at = math.max(at, throttled)
  out[2] = string.format("%.0f", at * 1000)
  -- the due jobs the limit kept from this fetch, up to what it asked for
  -- less what it leased (+ 16 each): one ZCOUNT a level, on held fetches only
  local kept, want = 0, asked - leased
  for _, level in ipairs(levels) do
    if kept >= want then break end
    kept = kept + redis.call("ZCOUNT", level[2], "-inf", due_max(now))
  end
  kept = math.min(kept, want)
  out[6] = out[6] + (global_full and 1 or 0) + (rate_full and 2 or 0) + (throttled > 0 and 4 or 0) + 16 * kept
  -- seconds past in the lease counts, as below: a queue always at its limit
  -- is held at most fetches
  if math.floor(now / 1000) % 10 == 0 then lease_counts().prune(3, now) end
  if attrs[8] and attrs[8] ~= "" then
    set[#set + 1] = "redjob:handoff"
    set[#set + 1] = ""
  end
-- fewer leased than asked (orphans count as not leased): the worker will wait
elseif leased < asked then
  local first
  for _, level in ipairs(levels) do
    local f = redis.call("ZRANGE", level[2], 0, 0, "WITHSCORES")
    -- in µs: a score's whole ms (its thousandths are a delivery count), or the
    -- first job's exact due while the exact dues hold it (a fetch takes a job
    -- before its score's ms only through them: a keyed job's, or one past the
    -- 1,000 an unserved queue keeps, is taken at that ms)
    if f[2] then
      local score = tonumber(f[2])
      local due = exact_due(f[1], score)
      if due and not (attrs[10] and tonumber(redis.call("ZSCORE", KEYS[4], f[1])) == due) then due = nil end
      due = due or math.floor(score) * 1000
      if (now >= LEGACY or score < LEGACY) and (not first or due < first) then first = due end
    end
    -- a lease an earlier redjob wrote (see LEGACY) ends: taken back then
    if legacy then
      local old = redis.call("ZRANGEBYSCORE", level[2], LEGACY, "+inf", "WITHSCORES", "LIMIT", 0, 1)
      if old[2] then
        local ends = (math.floor(tonumber(old[2])) - LEGACY) * 1000
        if not first or ends < first then first = ends end
      end
    end
  end
  -- the next exact due: of the first 10 still to come, the first whose job is
  -- still at its send's score; those whose jobs moved or left are dropped
  local e = attrs[10] and
    redis.call("ZRANGEBYSCORE", KEYS[4], string.format("(%.0f", now_us), "+inf", "WITHSCORES", "LIMIT", 0, 10) or {}
  local gone = {}
  for j = 1, #e, 2 do
    local due = tonumber(e[j + 1])
    local held = false
    for _, level in ipairs(levels) do
      local s = redis.call("ZSCORE", level[2], e[j])
      if s then
        held = exact_due(e[j], tonumber(s)) == due
        break
      end
    end
    if held then
      if not first or due < first then first = due end
      break
    end
    gone[#gone + 1] = e[j]
  end
  if #gone > 0 then
    allow_writes(KEYS[1])
    many("ZREM", KEYS[4], gone)
  end
  -- seconds past in the lease counts (fields left by leases an RSMQ client
  -- deleted or re-hid): looked for in one second of ten
  if math.floor(now / 1000) % 10 == 0 then
    lease_counts().prune(3, now)
    -- concurrency keys whose holders an RSMQ client deleted (or a pop took)
    -- free their places: 10 keys a step (HSCAN) from the cursor kept in
    -- "redjob:ksweep", while the queue had keyed jobs ("redjob:keyed")
    if attrs[18] then
      local r = redis.pcall("HSCAN", KEYS[7], attrs[19] or "0", "COUNT", 10)
      if type(r) == "table" and not r.err then
        local K = concurrency_keys(6, 7, 1, now, 8)
        local promoted = 0
        for j = 1, #r[2], 2 do promoted = promoted + K.fill(r[2][j]) end
        K.save()
        -- promoted jobs may be due: the worker fetches again at once
        if promoted > 0 then first = now_us end
        set[#set + 1] = "redjob:ksweep"
        set[#set + 1] = r[1]
      end
    end
    -- last errors, attempt records and released jobs' last lease ends
    -- ("<id>:err", "<id>:a", "<id>:l") of jobs that are gone: an RSMQ
    -- client's deleteMessage deletes only a message's body, rc and fr fields.
    -- One HSCAN step (about 100 fields) from the cursor kept in
    -- "redjob:sweep", while such fields may exist ("redjob:errors", or
    -- "redjob:released" not 0, which the "<id>:l" dropped count down). Under
    -- an ACL that refuses HSCAN (granted before this sweep existed) the fetch
    -- goes on without it
    local r = (attrs[12] or released_now > 0)
      and redis.pcall("HSCAN", KEYS[2], attrs[13] or "0", "MATCH", "*:[ael]*", "COUNT", 100)
    if type(r) == "table" and not r.err then
      local drop = {}
      for j = 1, #r[2], 2 do
        local f = r[2][j]
        local id = string.match(f, "^(.+):a$") or string.match(f, "^(.+):err$")
        local lid = not id and string.match(f, "^(.+):l$")
        if (id or lid) and string.sub(f, 1, 7) ~= "redjob:" and redis.call("HEXISTS", KEYS[2], id or lid) == 0 then
          drop[#drop + 1] = f
          if lid then released_now = math.max(released_now - 1, 0) end
        end
      end
      if #drop > 0 then
        allow_writes(KEYS[1])
        many("HDEL", KEYS[2], drop)
      end
      set[#set + 1] = "redjob:sweep"
      set[#set + 1] = r[1]
    end
    -- unique keys of jobs that are gone (see sweep_unique in lib.lua), from
    -- the cursor kept in "redjob:usweep", while the queue had unique keys
    local u = redis.call("HMGET", KEYS[2], "redjob:unique", "redjob:usweep")
    if u[1] then
      local c = sweep_unique(KEYS[9], u[2] or "0", function(lv)
        if lv == 0 or #KEYS >= 29 then return level_key(lv, 10) end
      end)
      if c then
        set[#set + 1] = "redjob:usweep"
        set[#set + 1] = c
      end
    end
  end
  -- a key whose places free later: the worker wakes then
  if attrs[18] then
    local w = redis.call("ZRANGE", KEYS[8], 0, 0, "WITHSCORES")[2]
    if w and (not first or tonumber(w) * 1000 < first) then first = tonumber(w) * 1000 end
    -- while keyed jobs wait, the worker also wakes for a sweep of the keys
    -- (in one second of ten) a minute on: a holder an RSMQ client deleted
    -- (or popped) ran no script to give its place on, and no send may come.
    -- A holder's settle wakes the workers itself, so this is only that
    -- case's way out, and a minute keeps queues whose keyed jobs wait
    -- behind long runs near idle (one fetch a minute a worker). It aims at
    -- the middle of that second: a wake at its very start that lands a
    -- millisecond early by Redis's clock swept nothing, and named the next
    -- such second a minute on
    if redis.call("ZCARD", KEYS[6]) > 0 then
      local sweep = (math.floor((now + 60000) / 10000) + 1) * 10000000 + 500000
      if not first or sweep < first then first = sweep end
    end
  end
  if first then out[2] = string.format("%.0f", first) end
  if attrs[4] ~= "1" then
    set[#set + 1] = "redjob:waiting"
    set[#set + 1] = "1"
  end
  local reg = ARGV[3] or ""
  if reg ~= "" then
    -- (a "v2" registration, of an earlier redjob's worker, ignores the count)
    local n = math.max(1, math.min(HANDS_MAX, math.floor(tonumber(ARGV[4]) or 1)) - leased)
    local head = attrs[8]
    local other = head and head ~= "" and head ~= reg and string.sub(head, 1, 3) == "v3 "
    local left = (other or head == reg) and redis.call("HGET", KEYS[2], "redjob:handoffs")
    if other then
      -- a worker that no longer listens (stopped, or gone) gives its place
      -- up here rather than to the send that would try it
      local r = registration(head)
      local subs = r and redis.pcall("PUBSUB", "NUMSUB", r[2])
      if not r or (type(subs) == "table" and not subs.err and subs[2] == 0) then other = false end
    end
    if other then
      -- another idle worker's registration is in place: this one waits in
      -- line behind it (or, in line already, is counted anew where it is),
      -- so that a send finding that one used up hands to this one rather
      -- than waking every idle worker of the queue
      left = left or "1"
      local line = in_line(left) and line_read(2) or {at = 1}
      local entry, at = n .. " " .. reg, #line + 1
      for j = 1, #line do
        if string.sub(line[j], -#reg - 1) == " " .. reg then at = j end
      end
      if at <= LINE_MAX then
        line[at] = entry
        set[#set + 1] = "redjob:line"
        set[#set + 1] = table.concat(line, "\n")
        if not in_line(left) then
          set[#set + 1] = "redjob:handoffs"
          set[#set + 1] = left .. "+"
        end
      end
    else
      -- none in place (a line behind none is stale), an earlier redjob's, one
      -- whose worker no longer listens, or this worker's own: it takes the
      -- place, and keeps the line behind it
      if head ~= reg then
        set[#set + 1] = "redjob:handoff"
        set[#set + 1] = reg
      end
      local plus = in_line(left)
      if plus then
        -- its own entry, when it waited in line, goes
        local line = line_read(2)
        local kept = line_without(line, reg)
        if #kept < #line then
          plus = #kept > 0
          set[#set + 1] = "redjob:line"
          set[#set + 1] = table.concat(kept, "\n")
        end
      end
      set[#set + 1] = "redjob:handoffs"
      set[#set + 1] = plus and n .. "+" or n
    end
  end
elseif attrs[8] and attrs[8] ~= "" then
  -- a full fetch: a hand-off registration (this worker's or another's) would
  -- send the next job to a worker that may have no slot for it
  set[#set + 1] = "redjob:handoff"
  set[#set + 1] = ""
end
if released_now ~= released_was then
  -- what this fetch dropped itself, off the count as it is now: a fill or
  -- an orphans' drop on the way (forget_released in lib.lua) wrote its own
  local now_count = tonumber(redis.call("HGET", KEYS[2], "redjob:released")) or 0
  set[#set + 1] = "redjob:released"
  set[#set + 1] = string.format("%.0f", math.max(now_count - (released_was - released_now), 0))
end
if #set > 0 then
  if leased == 0 then allow_writes(KEYS[1]) end
  many("HSET", KEYS[2], set, 4000)
end
return out
