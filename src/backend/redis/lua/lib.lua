-- Prepended to every script. Lua's unpack() takes a few thousand values at most,
-- so a command over a long list runs in chunks. `step` must be even for pair lists.
-- Returns the chunks' array replies joined, or their integer replies summed.
local function many(cmd, key, list, step)
  step = step or 4000
  if #list == 0 then return {}, 0 end
  if #list <= step then
    local r = redis.call(cmd, key, unpack(list))
    if type(r) == "table" then return r, 0 end
    return {}, r
  end
  local joined, sum = {}, 0
  for i = 1, #list, step do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
    if type(r) == "table" then
      for j = 1, #r do joined[#joined + 1] = r[j] end
    else
      sum = sum + r
    end
  end
  return joined, sum
end

-- A leased job is scored at its lease end (Unix ms), as RSMQ scores a received
-- message at the end of its visibility timeout, so that RSMQ clients see it
-- again once its lease runs out, whatever became of its worker. The score's
-- thousandths tell it apart: 500 + the delivery count (so "<end>.501" is a first
-- delivery's lease), where every other score carries the count alone (0..499:
-- a retry's "<due>.<count>", a send's or an RSMQ client's whole ms). The count
-- stops at MAX_COUNT.
local LEASE_MARK, MAX_COUNT = 500, 499
-- Until the clock reaches LEGACY (the year 2096), scores from LEGACY on are
-- leases written before leases kept their real end (LEGACY + <end ms>); no score
-- is written there any more (due times stop below it, at LAST_DUE), and a fetch
-- that finds nothing due takes such a lease back once it ran out (see
-- fetch.lua). From then on, every score is a time: where the scores of jobs and
-- leases end at `now` is `(now < LEGACY and LEGACY or math.huge)`.
-- (Helpers are few: each closure lib.lua defines costs every script call.)
local LEGACY = 4000000000000
local LAST_DUE = LEGACY - 1

-- The highest due score at `now` (ms) as an exclusive ZRANGEBYSCORE bound: every
-- score in the ms `now` or before, so a retry scored "<due>.<count>" is due at
-- <due> as inspection reports it, and a lease that ended in `now` has run out.
local function due_max(now)
  return string.format("(%.0f", math.min(now + 1, now < LEGACY and LEGACY or math.huge))
end

-- The delivery count a score carries, and whether it is a lease's (see
-- LEASE_MARK).
local function score_count(score)
  local t = math.floor((score - math.floor(score)) * 1000 + 0.5)
  if t >= LEASE_MARK then return t - LEASE_MARK, true end
  return t, false
end

-- A lease's score as text: ending at `ends` (whole ms) on delivery `count`.
local function lease_score(ends, count)
  return string.format("%d.%03d", ends, LEASE_MARK + math.min(count, MAX_COUNT))
end

-- The running leases of a queue are counted by the second they end in, in the
-- hash KEYS[k] (ns:q:leases, field "<Unix s>" = leases ending in it), so that a
-- count by state stays a few commands: leases in flight are the sum of the
-- fields from this second on. Adds `n` (negative: removes) at the second of
-- `ends` (ms); a field that reaches 0 is removed. A lease that leaves (settled,
-- fetched again after it ran out, deleted) takes itself off its field, passed
-- or not; a lease is not added at a second that has passed (no count reads it;
-- prune drops fields left behind). A function of its own, so that a send's
-- hand-off, which only adds its lease, makes none of lease_counts' closures.
local function lease_count(k, ends, n, now)
  local s = math.floor(ends / 1000)
  if n == 0 or (n > 0 and s < math.floor(now / 1000)) then return end
  -- "%d" for a whole number: its digits, where "%.0f" goes through the C
  -- library's float formatting, several times the work
  local f = string.format("%d", s)
  -- HGET, then HSET or HDEL: a count that reaches 0 goes, which HINCRBY
  -- alone would leave (a hand-off, which only adds, counts by
  -- hand_off_count)
  local old = redis.call("HGET", KEYS[k], f)
  if not old and n < 0 then return end
  local v = (tonumber(old) or 0) + n
  if v > 0 then
    redis.call("HSET", KEYS[k], f, string.format("%d", v))
  else
    redis.call("HDEL", KEYS[k], f)
  end
end

-- The lease counts (see lease_count), built by a script that uses them: each
-- closure lib.lua defines costs every script call its creation, so these come
-- as one.
--   L.count(k, ends, n, now), L.changes(k, by, now), L.left(k, scores, now),
--   L.prune(k, now), L.after(k, now)
local function lease_counts()
  local count = lease_count

  -- Adds, per second, the lease changes in `by` ({[ends ms] = n}) to KEYS[k].
  local function changes(k, by, now)
    local per = {}
    for ends, n in pairs(by) do
      local s = math.floor(ends / 1000)
      per[s] = (per[s] or 0) + n
    end
    for s, n in pairs(per) do count(k, s * 1000, n, now) end
  end

  -- Takes the leases among `scores` (numbers; others are skipped) off the lease
  -- counts KEYS[k]: their jobs left the queue or moved (a delete, a cancel, a
  -- change of visibility).
  local function left(k, scores, now)
    local by = {}
    for _, s in ipairs(scores) do
      if s and select(2, score_count(s)) then
        local e = math.floor(s)
        by[e] = (by[e] or 0) - 1
      end
    end
    changes(k, by, now)
  end

  -- Removes the seconds that have passed from the lease counts KEYS[k]: one HKEYS
  -- of as many fields as seconds in which running leases end (at most as many as
  -- leases run).
  local function prune(k, now)
    local past = {}
    local s = math.floor(now / 1000)
    for _, f in ipairs(redis.call("HKEYS", KEYS[k])) do
      if (tonumber(f) or 0) < s then past[#past + 1] = f end
    end
    if #past > 0 then many("HDEL", KEYS[k], past) end
  end

  -- By the lease counts KEYS[k] (see count): how many leases end after the
  -- second of `now` (ms), how many end in it, and the first second from it
  -- in which some end (nil: none).
  local function after(k, now)
    local s, n = math.floor(now / 1000), 0
    local live, first = {}, nil
    for _, f in ipairs(redis.call("HKEYS", KEYS[k])) do
      local t = tonumber(f) or 0
      if t >= s then
        live[#live + 1] = f
        if not first or t < first then first = t end
      end
    end
    local this = 0
    for i, v in ipairs(many("HMGET", KEYS[k], live)) do
      if tonumber(live[i]) == s then this = tonumber(v) or 0 else n = n + (tonumber(v) or 0) end
    end
    return n, this, first
  end
  return {count = count, changes = changes, left = left, prune = prune, after = after}
end

-- Workers must keep draining a queue when Redis is at maxmemory with noeviction
-- (acks free memory). Redis refuses only a script's first write over maxmemory,
-- and only a write that may grow memory: so before a first write that may, the
-- worker scripts make one that cannot (ZREM of the empty member, which no
-- message has).
local function allow_writes(zset)
  redis.call("ZREM", zset, "")
end

-- The sorted set of priority `p` when the caller passed the level keys from
-- KEYS[first]: priorities 10..1, then -1..-10 (priority 0 is KEYS[zero],
-- KEYS[1] unless given: a script over several queues passes each one's).
local function level_key(p, first, zero)
  if p == 0 then return KEYS[zero or 1] end
  return KEYS[p > 0 and first + 10 - p or first + 9 - p]
end

-- A queue's sorted sets to read, highest priority first, as {priority, key}:
-- KEYS[zero] (priority 0, KEYS[1] unless given) and, when the caller passed
-- the level keys (from KEYS[first], see level_key), each level whose bit
-- (priority + 10) is set in `mask`, the hash field "redjob:prio" that sends
-- keep.
local function level_sets(mask, first, zero)
  if mask == 0 or #KEYS < first + 19 then return {{0, KEYS[zero or 1]}} end
  local out = {}
  for p = 10, -10, -1 do
    if p == 0 or bit.band(mask, bit.lshift(1, p + 10)) ~= 0 then
      out[#out + 1] = {p, level_key(p, first, zero)}
    end
  end
  return out
end

-- Picks up what an RSMQ client's deleteQueue of a queue left (it removes ns:q
-- and ns:q:Q alone): each level whose sorted set (ns:q:p<n>) still exists gets
-- its bit in the hash field "redjob:prio", so that fetches read it and drop the
-- members without a body, and unique keys left (ns:q:unique) set the field
-- "redjob:unique", so that idle fetches sweep those of jobs that are gone (see
-- sweep_unique). KEYS[h] is the queue's hash, KEYS[u] its unique keys, the
-- levels' sorted sets from KEYS[first] (see level_key). 22 commands at most.
local function take_up_left(h, u, first)
  local mask = tonumber(redis.call("HGET", KEYS[h], "redjob:prio")) or 0
  for p = 10, -10, -1 do
    if p ~= 0 and redis.call("EXISTS", level_key(p, first)) == 1 then mask = bit.bor(mask, bit.lshift(1, p + 10)) end
  end
  if mask ~= 0 then redis.call("HSET", KEYS[h], "redjob:prio", mask) end
  if redis.call("EXISTS", KEYS[u]) == 1 then redis.call("HSET", KEYS[h], "redjob:unique", "1") end
end

-- Where the queue holds `id`: its level ({priority, key}, see level_sets, with
-- the level keys from KEYS[first]) and its score (text); nil when no level does.
local function find_level(mask, first, id)
  for _, level in ipairs(level_sets(mask, first)) do
    local s = redis.call("ZSCORE", level[2], id)
    if s then return level, s end
  end
end

-- When a message sent by redjob with a delay is due, exactly (Unix µs), while its
-- score is still the one its send set: the id holds the send's µs (the prefix)
-- and, after a ":" at 24 (which no RSMQ client's random part has), the delay in
-- ms as 8 base-36 digits (see id.rs); its score is that time rounded up to the
-- ms. nil for any other id, or a score set since (a retry, a receive, a change
-- of visibility): the score alone then says when the message is due.
local function exact_due(id, score)
  if string.byte(id, 24) ~= 58 then return nil end
  local t, v = tonumber(string.sub(id, 1, 10), 36), tonumber(string.sub(id, 25), 36)
  if not t or not v then return nil end
  local due = t + v * 1000
  if math.ceil(due / 1000) ~= score then return nil end
  return due
end

-- Adds the messages of a send whose ids mark a delay (see exact_due) to the
-- queue's exact dues, the sorted set KEYS[k] (ns:q:exact, member id, score its
-- exact due in µs): a fetch finds there the jobs due before the ms their score
-- is rounded up to, however many other jobs share that ms. `zargs` are the
-- send's score/id pairs.
-- Their fetches drop the dues that passed; a queue no redjob worker has fetched
-- from yet (`served` false: RSMQ clients' receives drop nothing) keeps at most
-- 1,000 of them. The queue's hash field "redjob:exact" (`flagged`: its value)
-- tells fetches the set may hold some; a queue that never had one reads nothing.
local function index_exact(k, zargs, served, flagged)
  local e = {}
  for i = 1, #zargs, 2 do
    local due = exact_due(zargs[i + 1], tonumber(zargs[i]))
    if due then
      e[#e + 1] = string.format("%.0f", due)
      e[#e + 1] = zargs[i + 1]
    end
  end
  if #e == 0 then return end
  if not served and redis.call("ZCARD", KEYS[k]) >= 1000 then return end
  many("ZADD", KEYS[k], e)
  if not flagged then redis.call("HSET", KEYS[2], "redjob:exact", "1") end
end

-- The score to give `id` for visibility at `s` (whole ms) when it is not its
-- send's: `s`, as asked. Should the id's exact due (see exact_due) fall in the
-- ms before s, its entry in the queue's exact dues (KEYS[k], ns:q:exact, see
-- index_exact) goes, as a re-score drops it in memory: a fetch takes the
-- message at s, not at that due (one ZREM, only then).
local function rescore(id, s, k)
  if exact_due(id, s) then redis.call("ZREM", KEYS[k], id) end
  return s
end

-- TIME's seconds as last parsed, text and number. A function library (the
-- plain send, see functions.rs) runs this chunk once and keeps them between
-- calls, so its sends parse the seconds once a second (a number's parse is
-- ~1.4k instructions, BENCHMARKS.md, Speed II part 21); a script runs its
-- chunk on every call and parses them each time. Only a memo: a call's
-- result is the same either way.
local clock_text, clock_sec
-- Redis's clock: now in Unix ms, and in Unix µs, then TIME's reply itself
-- (its seconds and microseconds as text).
local function clock()
  local t = redis.call("TIME")
  -- each part parsed once (a number's parse costs more than the rest)
  if t[1] ~= clock_text then clock_text, clock_sec = t[1], tonumber(t[1]) end
  local sec, us = clock_sec, tonumber(t[2])
  return sec * 1000 + math.floor(us / 1000), sec * 1000000 + us, t
end

-- The id prefix of a send at `us` (Unix µs): ten base-36 digits (0-9a-z).
local function id_prefix(us)
  -- two halves of five digits each, in exact integer arithmetic on doubles,
  -- spelled out: a loop over a table of digits cost twice the instructions
  local hi = math.floor(us / 60466176)
  local lo = us - hi * 60466176
  local a5 = hi % 36; hi = (hi - a5) / 36
  local a4 = hi % 36; hi = (hi - a4) / 36
  local a3 = hi % 36; hi = (hi - a3) / 36
  -- the first digit wraps as the old loop's did: from 2085 on (36^10 µs) a
  -- time has eleven digits, and the prefix keeps the last ten
  local a2 = hi % 36; local a1 = ((hi - a2) / 36) % 36
  local b5 = lo % 36; lo = (lo - b5) / 36
  local b4 = lo % 36; lo = (lo - b4) / 36
  local b3 = lo % 36; lo = (lo - b3) / 36
  local b2 = lo % 36; local b1 = (lo - b2) / 36
  -- "0".."9" are 48..57, "a".."z" 97..122
  return string.char(a1 < 10 and 48 + a1 or 87 + a1, a2 < 10 and 48 + a2 or 87 + a2,
    a3 < 10 and 48 + a3 or 87 + a3, a4 < 10 and 48 + a4 or 87 + a4, a5 < 10 and 48 + a5 or 87 + a5,
    b1 < 10 and 48 + b1 or 87 + b1, b2 < 10 and 48 + b2 or 87 + b2, b3 < 10 and 48 + b3 or 87 + b3,
    b4 < 10 and 48 + b4 or 87 + b4, b5 < 10 and 48 + b5 or 87 + b5)
end

-- A queue's maxsize as last parsed (a memo, as clock's): its text, its
-- number, and the digits of its whole part (0: always compare).
local maxsize_text, maxsize_num, maxsize_digits
-- A queue's maxsize from its hash field's text: its number (-1: none; nil
-- for a text that is no number) and the digits of its whole part.
local function queue_maxsize(text)
  if text ~= maxsize_text then
    local m = tonumber(text)
    -- (another client's garbage: the error names it)
    if not m then error("ERR the queue's maxsize is not a number") end
    maxsize_text, maxsize_num = text, m
    maxsize_digits = (m and m >= 1 and m < 2147483648) and #string.format("%d", m) or 0
  end
  return maxsize_num, maxsize_digits
end

-- Fails a send whose queue's delay another client wrote as no number.
local function not_a_delay()
  error("ERR the queue's delay is not a number")
end

-- The checks every send (send.lua, unique.lua) starts with: `attrs` is its HMGET
-- of the queue's hash, from "delay", "maxsize"; ARGV[3] the largest body length.
-- Returns the refusal ({-1}: no such queue; {-2, maxlen, maxsize}: a body too
-- large), or nil and the queue's delay in ms, now in ms and µs, the id prefix,
-- and TIME's reply (see clock).
local function send_start(attrs)
  if not attrs[1] then return {-1} end
  local maxsize, digits = queue_maxsize(attrs[2])
  -- ARGV[3] must be a plain decimal integer (a length, as every caller
  -- formats a usize): one of fewer digits than maxsize's whole part is below
  -- it, without parsing it ("1e9" would pass unchecked)
  if maxsize ~= -1 and #ARGV[3] >= digits then
    local maxlen = tonumber(ARGV[3])
    if maxlen > maxsize then return {-2, maxlen, maxsize} end
  end
  local now, us, time = clock()
  -- (a queue's delay is mostly "0": no number to parse)
  local delay = attrs[1] == "0" and 0 or (tonumber(attrs[1]) or not_a_delay()) * 1000
  return nil, delay, now, us, id_prefix(us), time
end

-- A queue's limits across the fleet from its hash fields "redjob:concurrency"
-- ("<per worker> <global>") and "redjob:rate" ("<max> <period ms>"), see
-- QueueSettings::FIELDS: the global concurrency (0: none), the rate's max and
-- period (0, 0: none), and whether any limit is set. A value Rust would not
-- read (Concurrency::decode, RateLimit::decode: numbers up to 1,000,000, a
-- period up to 24 h) limits nothing here either.
local function fleet_limits(conc, rate)
  local pw, global, rest = string.match(conc or "", "^(%d+) (%d+)(.*)$")
  global = tonumber(global) or 0
  if pw and (global > 1000000 or tonumber(pw) > 1000000 or (rest ~= "" and string.sub(rest, 1, 1) ~= " ")) then
    global = 0
  end
  local n, ms = string.match(rate or "", "^(%d+) (%d+)$")
  n, ms = tonumber(n) or 0, tonumber(ms) or 0
  if n == 0 or ms == 0 or n > 1000000 or ms > 86400000 then n, ms = 0, 0 end
  return global > 0 or n > 0, global, n, ms
end

-- The end of a handler's throttle (hash field "redjob:throttled", Unix ms, see
-- complete.lua) while it lasts at `now`, else 0. A value that is no whole
-- number of 1 to 15 digits (written by hand: "nan", "1e400", 20 digits)
-- holds nothing: a NaN compared false both ways and held the queue with no
-- end, its fetches called again at once.
local function throttle_end(v, now)
  if not v or #v == 0 or #v > 15 or string.find(v, "%D") then return 0 end
  local t = tonumber(v)
  if t <= now then return 0 end
  return t
end

-- The most jobs a worker's hand-off registration is good for (see
-- registration): a worker registers for its free running slots up to this,
-- and reclaim.lua reads the notes of as many hand-offs (each a hash field of
-- the queue's while the worker lives: a few, so that the queue's hash stays
-- small; an idle worker fetches once every 8 jobs rather than after each).
local HANDS_MAX = 8

-- A worker's hand-off registration ("v3 <lease ms> <channel> <queue>", or an
-- earlier redjob's "v2 ...", see hand_off) read: {lease, channel, queue,
-- "redjob:handed <channel>", counted} (hand_off adds the names of its notes
-- by count, [6]), or false for one that is none;
-- `counted`: a "v3", good for as many jobs as the hash field
-- "redjob:handoffs" says (a "v2" is good for one). Its three words after the
-- version are found by plain searches (a pattern's captures cost several
-- times as much): the lease's digits, then the channel and the queue,
-- neither empty nor holding a space.
local function registration(reg)
  local v = string.sub(reg, 1, 3)
  local a = (v == "v3 " or v == "v2 ") and string.find(reg, " ", 4, true)
  local b = a and string.find(reg, " ", a + 1, true)
  if not b or b == a + 1 or b == #reg or string.find(reg, " ", b + 1, true) then return false end
  local digits = string.sub(reg, 4, a - 1)
  if string.find(digits, "%D") then return false end
  local lease = tonumber(digits)
  if not lease then return false end
  local channel = string.sub(reg, a + 1, b - 1)
  return {lease, channel, string.sub(reg, b + 1), "redjob:handed " .. channel, v == "v3 "}
end

-- Memos of hand_off's, as clock's: the registrations read (text -> what
-- registration returned, at most 64, then anew), and the seconds a lease's
-- token last ended in, as a number and as its digits. Nil until a hand-off:
-- a script's chunk, which runs on every call, makes no table for them.
local registrations, registered, token_sec, token_text
-- A counted registration's counts ("2" .. HANDS_MAX, as the hash holds them)
-- -> the count after a hand-off, as text: made at the first hand-off (a
-- library's chunk keeps it), so that a hand-off neither parses the count nor
-- turns a number into text (Lua's "%.14g")
local next_count

-- The most workers that wait in line for hand-offs behind the one registered
-- (the hash field "redjob:line", see line_read): idle workers of a queue
-- beyond it hear of its jobs when a send finds no one registered (which
-- wakes them all), from a batch's send, a release or their fallback poll;
-- meanwhile those in line take the jobs.
local LINE_MAX = 64

-- How many registrations a send tries in all, the one in place and those it
-- takes from the line, before it gives up on a hand-off (each a worker that
-- no longer listens, a registration that is none).
local LINE_TRIES = 4

-- Whether a registration's count (the hash field "redjob:handoffs", `left`)
-- says a line waits behind it: its last character is "+".
local function in_line(left)
  return left and string.byte(left, #left) == 43 or false
end

-- The line of the queue's hash KEYS[k], "redjob:line": registrations of idle
-- workers waiting behind the one in place ("redjob:handoff"), oldest first,
-- each "<n> <registration>" (n: the jobs it is good for, as "redjob:handoffs"
-- counts the one in place), one a line. Read only while the count in place
-- ends in "+" (see in_line): a line without it, or behind no registration,
-- is stale. Returns a table of the entries, read from `at`.
local function line_read(k)
  local t = {at = 1}
  local text = redis.call("HGET", KEYS[k], "redjob:line")
  if text then
    for e in string.gmatch(text, "[^\n]+") do t[#t + 1] = e end
  end
  return t
end

-- Takes the next entry of `line` (see line_read) that is not registration
-- `skip` (one used up, or withdrawn): its registration and its count, with
-- "+" when entries are left behind it; nil when none is left.
local function line_next(line, skip)
  local e = line[line.at]
  if not e then return end
  line.at = line.at + 1
  local sp = string.find(e, " ", 1, true)
  if not sp or string.sub(e, sp + 1) == skip then return line_next(line, skip) end
  local n = string.sub(e, 1, sp - 1)
  if line[line.at] then n = n .. "+" end
  return string.sub(e, sp + 1), n
end

-- The entries of `line` (see line_read) other than registration `reg`'s, in
-- order (a worker taking the place it waited in line for leaves the line).
local function line_without(line, reg)
  local kept = {at = 1}
  for j = line.at, #line do
    if string.sub(line[j], -#reg - 1) ~= " " .. reg then kept[#kept + 1] = line[j] end
  end
  return kept
end

-- The entries of `line` not yet taken, as the hash field holds them.
local function line_rest(line)
  return table.concat(line, "\n", line.at, #line)
end

-- Hands the first message of a send, `id` with `body` (due by `now`), to the
-- worker waiting on the queue: `reg` is that worker's registration, the hash
-- field "redjob:handoff" its fetch set ("v3 <lease ms> <channel> <queue>", or
-- "v2 ..." of the release before, good for one job: a worker that scores
-- leases at their end; a registration of an earlier redjob's, which would
-- read this lease's token as its 500th delivery, gets no hand-off, only the
-- wake-up). PUBLISHes "<queue> <priority> <id> <token> <now
-- µs> <body>" on the worker's channel when the worker listens there, and leases
-- the message to it (its score becomes the token, delivery 1, as fetch.lua's).
-- Returns the hash field and value the send writes for the registration:
-- "redjob:handoff", "" clears it (a "v2" is good for one job, a "v3" for the
-- count in "redjob:handoffs": the last one it was good for, or one it cannot
-- take); "redjob:handoffs", n - 1 counts a "v3" good for n > 1 down (the
-- worker keeps it, so it need not fetch again to register); nil: it stays (the
-- queue is paused, limited across the fleet or throttled: nothing is handed).
-- While a line waits behind it (see line_read), a registration that is none,
-- whose worker no longer listens (up to LINE_TRIES are tried), or that was
-- good for this job only gives its place to the next in line: hand_off then
-- writes "redjob:handoffs" and "redjob:line" itself, and returns
-- "redjob:handoff" with the registration now in place.
-- Then, when the worker got the message: the lease's
-- token (the message's score) and end (ms), the hash field of what it handed
-- ("redjob:handed <channel>", or "redjob:handed <channel> <n>" for a
-- counted registration's hand-off that found n > 1, see reclaim.lua), what it
-- handed ("<id> <token> <priority>") and the receive's counts, "totalrecv" and "redjob:leased", for
-- the send to write with the message (values, not a table: a lone send writes
-- them with one HSET of its own arguments, and appending them to a table grew
-- it twice; BENCHMARKS.md, Speed II part 20).
-- `prio` is the message's priority (text). `f` holds the queue's hash fields
-- "redjob:paused", "redjob:handoff", "totalrecv", "redjob:leased",
-- "redjob:concurrency", "redjob:rate", "redjob:throttled" and
-- "redjob:handoffs" from `f[at]` on, as a lone send reads them with its first
-- HMGET; nil: hand_off reads them.
local function hand_off(reg, id, body, now, time, prio, f, at)
  if not f then
    -- only a send to a waiting worker needs them
    f, at = redis.call("HMGET", KEYS[2], "redjob:paused", "redjob:handoff", "totalrecv", "redjob:leased",
      "redjob:concurrency", "redjob:rate", "redjob:throttled", "redjob:handoffs"), 1
  end
  if f[at] then return end
  -- a queue limited across the fleet leases only through fetches, which
  -- count what runs (see fetch.lua): its workers are woken instead; a
  -- throttled one leases nothing until the throttle ends
  local conc, rate, throttled = f[at + 4], f[at + 5], f[at + 6]
  if (conc or rate) and fleet_limits(conc, rate) then return end
  if throttle_end(throttled, now) > 0 then return end
  -- the registration in place, or, when it is none or its worker no
  -- longer listens, the next in line (up to LINE_TRIES in all)
  local left, line = f[at + 7], nil
  local r
  for try = 1, LINE_TRIES do
    r = registrations and registrations[reg]
    if r == nil then
      r = registration(reg)
      -- a memo of the last 64 registrations seen (a worker registers the same
      -- text each time; a library's chunk keeps it between calls)
      if not registrations or registered >= 64 then registrations, registered = {}, 0 end
      registrations[reg], registered = r, registered + 1
    end
    if r then
      -- its subscriber, not a pattern's (a PUBLISH's reply counts those too); a
      -- producer whose ACL lacks PUBSUB NUMSUB sends as before, by a wake-up
      local subs = redis.pcall("PUBSUB", "NUMSUB", r[2])
      if subs.err then return "redjob:handoff", "" end
      if subs[2] ~= 0 then break end
      r = false
    end
    if not in_line(left) then
      if line then redis.call("HSET", KEYS[2], "redjob:line", "") end
      return "redjob:handoff", ""
    end
    line = line or line_read(2)
    reg, left = line_next(line)
    if not reg then
      redis.call("HSET", KEYS[2], "redjob:line", "")
      return "redjob:handoff", ""
    end
    if try == LINE_TRIES then
      -- tried enough for one send: the next in line takes the place untried
      redis.call("HSET", KEYS[2], "redjob:handoffs", left, "redjob:line", line_rest(line))
      return "redjob:handoff", reg
    end
  end
  local lease, channel = r[1], r[2]
  local ends = now + lease
  -- now in µs: TIME's seconds, then its microseconds in six digits
  local micro = time[2]
  if #micro < 6 then micro = string.sub("00000" .. micro, -6) end
  -- delivery 1's token, "<ends>.501": a lease of whole seconds ends at
  -- TIME's seconds plus the lease's (their digits kept for the second), then
  -- now's ms (the first three of the µs' six digits), without turning a
  -- number into text (BENCHMARKS.md, Speed II part 22); other leases take
  -- their digits from the number, below 10^14 ms (until the year 5138)
  local token
  if lease % 1000 == 0 and time[1] == clock_text and ends < 1e14 then
    local s = clock_sec + lease / 1000
    if s ~= token_sec then token_sec, token_text = s, string.format("%d", s) end
    token = token_text .. string.sub(micro, 1, 3) .. ".501"
  else
    token = ends < 1e14 and ends .. ".501" or lease_score(ends, 1)
  end
  redis.call("PUBLISH", channel, r[3] .. " " .. prio .. " " .. id .. " " ..
    token .. " " .. time[1] .. micro .. " " .. body)
  -- what went to the worker, in case its message never reaches it (its
  -- connection closed after the PUBLISH): its listener reads it back when it
  -- connects again (reclaim.lua), and has the job released unless it holds it
  -- (each hand-off of a counted registration in a field of its own, as
  -- several may be on their way at once: "redjob:handed <channel> <n>", n
  -- the count it found, the last one's without)
  local kf, kv, noted = "redjob:handoff", "", r[4]
  local after
  if r[5] then
    if not next_count then
      -- (with "+": a line waits behind it, and still does after)
      next_count = {}
      for n = 2, HANDS_MAX do
        next_count[tostring(n)] = tostring(n - 1)
        next_count[n .. "+"] = (n - 1) .. "+"
      end
    end
    -- (a count another client wrote that is not one of those, "1", or none
    -- is taken as one)
    after = left and next_count[left]
    if after then
      -- the field's names kept with the parsed registration (r[6], by count)
      local names = r[6]
      if not names then
        names = {}
        r[6] = names
      end
      noted = names[left]
      if not noted then
        noted = r[4] .. " " .. string.match(left, "^%d+")
        names[left] = noted
      end
      kf, kv = "redjob:handoffs", after
    end
  end
  if not after and in_line(left) then
    -- the last job it was good for: the next in line takes its place (a
    -- worker that no longer listens is found out by the send that tries it)
    line = line or line_read(2)
    local next_reg
    next_reg, left = line_next(line, reg)
    if next_reg then
      redis.call("HSET", KEYS[2], "redjob:handoffs", left, "redjob:line", line_rest(line))
      kf, kv = "redjob:handoff", next_reg
    else
      redis.call("HSET", KEYS[2], "redjob:line", "")
    end
  elseif line and after then
    -- the registration taken from the line, and what is left of the line
    redis.call("HSET", KEYS[2], "redjob:handoffs", after, "redjob:line", line_rest(line))
    kf, kv = "redjob:handoff", reg
  elseif line then
    -- the one taken from the line, the last in it, was good for this job only
    redis.call("HSET", KEYS[2], "redjob:line", "")
  end
  return kf, kv, token, ends, noted, id .. " " .. token .. " " .. prio,
    (tonumber(f[at + 2]) or 0) + 1, (tonumber(f[at + 3]) or 0) + 1
end

-- Counts a hand-off's lease in the lease counts KEYS[k] (see lease_count) by
-- one HINCRBY, its second given as a number (Redis writes an integral one
-- as an integer), where lease_count reads and writes; a producer on the ACL
-- rule from before `+hincrby` (docs/scale-out.md) counts it as lease_count
-- does.
local function hand_off_count(k, ends, now)
  local s = math.floor(ends / 1000)
  if s < math.floor(now / 1000) then return end
  local r = redis.pcall("HINCRBY", KEYS[k], s, 1)
  if type(r) == "table" and r.err then lease_count(k, ends, 1, now) end
end

-- Whether a redjob worker may wait for a wake-up, by the queue's hash field
-- "redjob:waiting" (`v`): "1", as a waiting worker's fetch set it, or no field
-- at all, as in a queue an RSMQ client created again (its deleteQueue took the
-- flag with the old hash, and its createQueue publishes nothing): the first
-- send then wakes the queue's workers once. A send that woke them writes
-- `woken(v)`: "0" (a worker has fetched from the queue), or "-" for a queue
-- no worker has fetched from since it was made (create.lua writes it too), "+"
-- when no redjob script had written the field (an RSMQ client made the queue):
-- as "-", and what an RSMQ client's deleteQueue of the name left is not
-- picked up yet (a fetch has adopt.lua do it, see fetch.lua).
local function may_wait(v)
  return not v or v == "1"
end

local function woken(v)
  return v and "0" or "+"
end

-- Whether a redjob worker has fetched from the queue (see may_wait).
local function worker_fetched(v)
  return v == "0" or v == "1"
end

-- Writes `n` messages of one priority level for a send (send.lua, periodic.lua):
-- `zargs` are score/id pairs for KEYS[1], `hargs` id/body pairs for KEYS[2]; adds
-- the sends to "totalsent" (from `attrs[3]`), clears "redjob:waiting" (`attrs[4]`)
-- and sets the level's bit in "redjob:prio" (`attrs[5]`, ARGV[4] the priority),
-- then PUBLISHes the length on ARGV[1] when ARGV[2] is "1" or a worker waits
-- (`handed`: the first message went to a waiting worker, see hand_off).
-- send.lua writes a lone message at priority 0 itself, as this would.
local function send_write(attrs, zargs, hargs, n, handed)
  -- a lone job handed to the waiting worker needs no wake-up; "redjob:waiting"
  -- stays set, so the next send wakes the queue's workers unless that worker
  -- registers for a hand-off again first
  local waiting = may_wait(attrs[4]) and not (handed and n == 1)
  hargs[#hargs + 1] = "totalsent"
  hargs[#hargs + 1] = (tonumber(attrs[3]) or 0) + n
  if waiting then
    hargs[#hargs + 1] = "redjob:waiting"
    hargs[#hargs + 1] = woken(attrs[4])
  end
  local level = tonumber(ARGV[4])
  if level ~= 0 then
    local mask = tonumber(attrs[5]) or 0
    local with = bit.bor(mask, bit.lshift(1, level + 10))
    if with ~= mask then
      hargs[#hargs + 1] = "redjob:prio"
      hargs[#hargs + 1] = with
    end
  end
  many("ZADD", KEYS[1], zargs)
  many("HSET", KEYS[2], hargs)
  if ARGV[2] == "1" or waiting then
    redis.call("PUBLISH", ARGV[1], redis.call("ZCARD", KEYS[1]))
  end
end

-- The score (whole ms, as text, and as a number) of a message sent at `now` ms /
-- `us` µs: `when` is "" for the queue's delay `qdelay` (ms), "d<ms>" for a
-- delay, "a<ms>" for a Unix time (a past one means now); whole ms, as the
-- clients send them.
local function due_score(when, now, us, qdelay)
  local s = now + qdelay
  if when ~= "" then
    local v = tonumber(string.sub(when, 2))
    if string.sub(when, 1, 1) ~= "d" then
      s = math.max(now, v)
    elseif v > 0 then
      -- rounded up: a delayed message is never due before send + delay
      s = math.ceil(us / 1000) + v
    else
      s = now
    end
  end
  -- cut below the legacy leases' scores (possible for long delays from 2096 on),
  -- whole ms (a delay in a queue's hash may have decimals)
  s = math.floor(math.min(s, LAST_DUE))
  -- "nan" (a delay another client wrote) is no time; "%d" would make it -2^63
  if s ~= s then error("ERR the queue's delay is not a number") end
  return string.format("%d", s), s
end

-- Publishes the ids among `ids` a caller awaits (KEYS[ka], ns:q:awaited, see
-- await.lua) on the queue's done channel, "ns:@done:q", from its realtime
-- channel "ns:rt:q" (`realtime`), and forgets them; `flag` is the queue
-- hash's "redjob:awaited" field as read (without it, nothing is awaited).
local function notify_awaited(ka, ids, realtime, flag)
  if not flag or #ids == 0 or #KEYS < ka then return end
  local channel = string.gsub(realtime, "rt:([%w_%-]+)$", "@done:%1")
  local at = many("ZMSCORE", KEYS[ka], ids)
  local done = {}
  for j, id in ipairs(ids) do
    if at[j] then done[#done + 1] = id end
  end
  if #done == 0 then return end
  many("ZREM", KEYS[ka], done)
  for _, id in ipairs(done) do redis.call("PUBLISH", channel, id) end
end

-- Forgets the last lease ends that released jobs among `ids` kept ("<id>:l", see
-- complete.lua) when they leave the queue, keeping their count in the hash field
-- "redjob:released" (fetches read those fields while it is not 0).
local function forget_released(ids)
  local n = tonumber(redis.call("HGET", KEYS[2], "redjob:released")) or 0
  if n <= 0 then return end
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = id .. ":l" end
  local _, gone = many("HDEL", KEYS[2], fields)
  if gone > 0 then
    redis.call("HSET", KEYS[2], "redjob:released", string.format("%.0f", math.max(n - gone, 0)))
  end
end

-- Frees the unique keys (see unique.lua) of jobs that left their queue (acked,
-- dead-lettered, deleted, popped). `ukey` is the queue's ns:q:unique. A key that a
-- newer job took over (after its lifetime ran out) stays with that job.
-- Returns, by id, "<expires ms, 0: never> <key>" of each key it freed (a dead
-- letter keeps it, to take the key again when it is requeued).
local function release_unique(ukey, ids)
  local ifields = {}
  for i, id in ipairs(ids) do ifields[i] = "i:" .. id end
  local keys = many("HMGET", ukey, ifields)
  local drop, kfields, owners = {}, {}, {}
  for i, key in ipairs(keys) do
    if key then
      drop[#drop + 1] = ifields[i]
      kfields[#kfields + 1] = "k:" .. key
      owners[#owners + 1] = ids[i]
    end
  end
  local freed = {}
  if #kfields == 0 then return freed end
  local entries = many("HMGET", ukey, kfields)
  for j, e in ipairs(entries) do
    if e and string.sub(e, 1, #owners[j] + 1) == owners[j] .. " " then
      drop[#drop + 1] = kfields[j]
      local ex = string.match(e, " (%d+)$")
      if ex then freed[owners[j]] = ex .. " " .. string.sub(kfields[j], 3) end
    end
  end
  many("HDEL", ukey, drop)
  return freed
end

-- Drops members that have no body left (evicted, or deleted halfway by another
-- client, as an RSMQ client's deleteMessage of a job at a priority other than
-- 0) from the sorted set `zset`, with the fields they may have kept, and, with
-- `ukey` (the queue's ns:q:unique, passed while the queue has unique keys),
-- their unique keys (see release_unique).
local function drop_orphans(zset, ids, ukey)
  many("ZREM", zset, ids)
  if ukey then release_unique(ukey, ids) end
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = id .. ":rc"
    fields[#fields + 1] = id .. ":fr"
    fields[#fields + 1] = id .. ":err"
    fields[#fields + 1] = id .. ":a"
  end
  many("HDEL", KEYS[2], fields)
  forget_released(ids)
end

-- One step of the idle fetches' sweep of a queue's unique keys (`ukey`,
-- ns:q:unique, see unique.lua), from `cursor`: an HSCAN of about 100 fields.
-- A back link "i:<id>" whose job has no body left (an RSMQ client's
-- deleteMessage or deleteQueue knows nothing of its key) is deleted, with the
-- key's "k:<key>" while that names the job, and the job's member of the sorted
-- set of the entry's priority, when `level` (priority -> key, or nil: not
-- passed) gives it. Returns the next cursor, or nil under an ACL that refuses
-- HSCAN (granted before this sweep existed).
local function sweep_unique(ukey, cursor, level)
  local r = redis.pcall("HSCAN", ukey, cursor, "MATCH", "i:*", "COUNT", 100)
  if type(r) ~= "table" or r.err then return nil end
  local gone, at = {}, {}
  for j = 1, #r[2], 2 do
    local id = string.sub(r[2][j], 3)
    if redis.call("HEXISTS", KEYS[2], id) == 0 then
      gone[#gone + 1] = id
      local e = redis.call("HGET", ukey, "k:" .. r[2][j + 1])
      local hid, lv = string.match(e or "", "^(%S+) (%S+) ")
      lv = tonumber(lv)
      local lk = hid == id and lv and lv >= -10 and lv <= 10 and level(lv)
      if lk then
        at[lk] = at[lk] or {}
        at[lk][#at[lk] + 1] = id
      end
    end
  end
  for lk, ids in pairs(at) do drop_orphans(lk, ids) end
  if #gone > 0 then release_unique(ukey, gone) end
  return r[1]
end

-- The most attempt records a job keeps (MAX_RECORDS in attempts.rs).
local MAX_RECORDS = 25

-- A job's attempt records (the field <id>:a: one JSON object per line, oldest
-- first, see attempts.rs) with `rec` added, keeping the last MAX_RECORDS.
-- `log` is the field's value or false.
local function append_attempt(log, rec)
  if not log or log == "" then return rec end
  log = log .. "\n" .. rec
  local lines = 0
  for _ in string.gmatch(log, "\n") do lines = lines + 1 end
  if lines >= MAX_RECORDS then
    local kept = {}
    for l in string.gmatch(log, "[^\n]+") do kept[#kept + 1] = l end
    log = table.concat(kept, "\n", #kept - MAX_RECORDS + 1)
  end
  return log
end

-- The attempt records `log` of a job cancelled or deleted at `now` (ms) while
-- its score was `score`: with a record of the run under way (outcome
-- `cancelled`, when it ended; its start and worker are the worker's, which
-- its settle, fenced off, never writes) when that was a lease not run out;
-- with the record a fetch writes (outcome `lease_lost`, when the lease ended,
-- see fetch.lua) when it ran out: its worker died, and no fetch delivers the
-- job again to record that run.
local function cancelled_run(log, score, now)
  local count, leased = score_count(score)
  if not leased then return log end
  local ends = math.floor(score)
  if ends <= now then
    return append_attempt(log, string.format('{"n":%d,"lease_end":%.0f,"outcome":"lease_lost"}', count, ends))
  end
  return append_attempt(log, string.format('{"n":%d,"end":%.0f,"outcome":"cancelled"}', count, now))
end

-- The rows of an inspection (job.lua, list.lua, peek.lua): `rows` are {priority,
-- id, score}; each gets from the hash `hkey` its body, the field <id><cf> (the
-- receive count ":rc" in a queue, the deliveries ":n" in the dead letters) and
-- its last error <id>:err. Returns them flat: priority, id, score, body, count,
-- error (false where a field is missing).
local function with_fields(hkey, rows, cf)
  local fields = {}
  for _, r in ipairs(rows) do
    fields[#fields + 1] = r[2]
    fields[#fields + 1] = r[2] .. cf
    fields[#fields + 1] = r[2] .. ":err"
  end
  local vals = many("HMGET", hkey, fields, 3000)
  local out = {}
  for i, r in ipairs(rows) do
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
    out[#out + 1] = r[3]
    out[#out + 1] = vals[3 * i - 2]
    out[#out + 1] = vals[3 * i - 1]
    out[#out + 1] = vals[3 * i]
  end
  return out
end

-- How many members of the sorted set `key` at score `s` (as text) sort before
-- `id`, which is not among them: where a cursor's row that left the set stood
-- among its ties. Ties sort by their bytes (Lua's `<` would go by the server's
-- locale); a binary search over their ranks runs about log2(ties) ZRANGEs of
-- one member each, so 100,000 ties cost some 20 commands, never a walk.
local function ties_below(key, s, id)
  local function before(a, b)
    for i = 1, math.min(#a, #b) do
      local x, y = string.byte(a, i), string.byte(b, i)
      if x ~= y then return x < y end
    end
    return #a < #b
  end
  local first = redis.call("ZCOUNT", key, "-inf", "(" .. s)
  local lo, hi = first, first + redis.call("ZCOUNT", key, s, s)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call("ZRANGE", key, mid, mid)[1]
    if m and before(m, id) then lo = mid + 1 else hi = mid end
  end
  return lo - first
end

-- The largest numbers Rust reads in a stored setting's u64 and i64, as digits.
local U64, I64 = "18446744073709551615", "9223372036854775807"

-- Whether the digits `d` (a %d+ match) are a number of at most `max` (U64 or
-- I64): one Rust reads in that type (compared as text, past what a Lua number
-- holds exactly; digits in stored.rs).
local function fits(d, max)
  d = string.match(d, "^0*(%d-)$")
  if #d ~= #max then return #d < #max end
  return d <= max
end

-- A queue's history setting (the hash field "redjob:history", see history.rs)
-- as numbers: on (true/false), most entries, longest age ms (0: no limit),
-- how long bodies are kept ms (-1: as long as the entry, 0: never). `stored`
-- is the field's value (false when none), `default` the caller's.
local function history_setting(stored, default)
  local on, keep, age, args = string.match(stored or "", "^([01]) (%d+) (%d+) (%-?%d+)$")
  -- (args below -1, or a number past a u64, an i64 for args: not a value
  -- Rust reads, History::decode)
  if not on or tonumber(args) < -1 or not fits(keep, U64) or not fits(age, U64)
      or not fits(string.match(args, "%d+"), I64) then
    on, keep, age, args = string.match(default or "", "^([01]) (%d+) (%d+) (%-?%d+)$")
  end
  if not on then return false, 0, 0, -1 end
  return on == "1", tonumber(keep), tonumber(age), tonumber(args)
end

-- When (Unix ms) a history entry says its job finished: its header's third
-- word ("h1 <how> <ms> ...", see history.rs), or nil for no entry. Readers
-- take the time from the entry, not from the history's index.
local function entry_ms(e)
  return tonumber(string.match(e or "", "^h1 %S+ (%d+)"))
end

-- The job type an envelope body names ("" for another body): its leading
-- "type" field, as redjob writes it.
local function body_type(body)
  return string.match(body, '^{"type":"([^"\\]*)"') or ""
end

-- An element of a queue's history list as its job's id and, for the form
-- "~<ms> <id>" (see history_ms), that ms (nil for a plain id).
local function history_element(v)
  if string.byte(v, 1) ~= 126 then return v, nil end
  local ms, id = string.match(v, "^~(%d+) (.+)$")
  return id or v, tonumber(ms)
end

-- The finish time (ms) of `v`, an element of a queue's history list
-- (KEYS[hh] its hash): a job's id, whose entry says it, or "~<ms> <id>", which
-- stands for its job's entry only while that entry is the one of `ms` (how a
-- dead job is listed: a dead letter may run again, under its id, and be
-- entered again); nil without an entry.
local function history_ms(hh, v)
  if not v then return nil end
  local id, ms = history_element(v)
  if ms then return ms end
  return entry_ms(redis.call("HGET", KEYS[hh], id))
end

-- The first index in [lo, hi) of the history's list (KEYS[hl], its hash
-- KEYS[hh]) whose element finished at `ms` or later (after `ms` when
-- `after`), hi when none: a binary search, the list being in finish order
-- (an element without an entry counts as older). Each step is one LINDEX
-- (O(its distance from the nearer end / 128)) and one HGET.
local function history_seek(hl, hh, lo, hi, ms, after)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local t = history_ms(hh, redis.call("LINDEX", KEYS[hl], mid))
    if not t or t < ms or (after and t == ms) then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- The first j in [lo, hi) of `win`, elements of the history's list in their
-- order (KEYS[hh] its hash), finished after `ms`, hi when none: a binary
-- search as history_seek's, one HGET a step.
local function window_seek(hh, win, lo, hi, ms)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local t = history_ms(hh, win[mid])
    if not t or t <= ms then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- The index in the history's list of job `id`'s element, finished at `ms`
-- (its own id, or `alt`: its "~<ms> <id>"), looked for among the elements of
-- that ms; nil when not there.
local function history_find(hl, hh, id, ms, alt)
  local n = redis.call("LLEN", KEYS[hl])
  local lo = history_seek(hl, hh, 0, n, ms, false)
  local hi = history_seek(hl, hh, lo, n, ms, true)
  -- (as many as finished in that ms: read 1000 at a time)
  for from = lo, hi - 1, 1000 do
    local w = redis.call("LRANGE", KEYS[hl], from, math.min(hi, from + 1000) - 1)
    for j = 1, #w do
      if w[j] == id or w[j] == alt then return from + j - 1 end
    end
  end
  return nil
end

-- The history's elements that stand for no entry: a dead job's "~<ms> <id>"
-- once the job, requeued, finished again and its entry was written anew. The
-- hash field "~stale" (KEYS[hh]) counts them, so that the count trim keeps
-- `keep` entries, not `keep` elements. `ids` are the jobs about to be entered
-- (their elements, "~<ms> <id>" or the id): each that has an entry already
-- leaves one more.
local function history_overwrites(hh, elements)
  local ids = {}
  for j, v in ipairs(elements) do ids[j] = (history_element(v)) end
  local n = 0
  for _, v in ipairs(many("HMGET", KEYS[hh], ids)) do
    if v then n = n + 1 end
  end
  if n > 0 then redis.call("HINCRBY", KEYS[hh], "~stale", n) end
end

-- Takes the `n` oldest elements off the history's list and drops their
-- entries (an element "~<ms> <id>" drops its job's entry only while it is
-- still the one of `ms`; one that is not counts as a stale element no
-- more, see history_overwrites). Returns how many went, and how many of
-- them stood for an entry.
local function history_pop(hl, hh, n)
  if n <= 0 then return 0, 0 end
  local gone = redis.call("LPOP", KEYS[hl], n)
  if not gone then return 0, 0 end
  -- (how many ever went from the list's head: the args mark's place counts from it)
  redis.call("HINCRBY", KEYS[hh], "~base", #gone)
  -- (a "~..." element names no field: its HDEL does nothing, so the
  -- elements are looked at only when fewer fields went than elements)
  local _, went = many("HDEL", KEYS[hh], gone)
  local entries, stale = went, 0
  for j = 1, went < #gone and #gone or 0 do
    if string.byte(gone[j], 1) == 126 then
      local id, at = history_element(gone[j])
      if at and entry_ms(redis.call("HGET", KEYS[hh], id)) == at then
        redis.call("HDEL", KEYS[hh], id)
        entries = entries + 1
      else
        stale = stale + 1
      end
    end
  end
  if stale > 0 then
    local left = redis.call("HINCRBY", KEYS[hh], "~stale", -stale)
    if left <= 0 then redis.call("HDEL", KEYS[hh], "~stale") end
  end
  return #gone, entries
end

-- Drops a queue's history entries past `age` ms and the oldest beyond `keep`
-- (0: no limit), at most `budget`, and the bodies of entries past `args` ms,
-- at `now` (ms). `hl`, `hh` are the indexes in KEYS of the history's list (its
-- ids, oldest first) and hash. An entry is "<header>\n<type>\n<actor>\n<records>\n<body>",
-- its header "h1 <how> <ms> <deliveries> <body bytes>[ k<key bytes>][
-- r<result bytes>]" (see history.rs: a keyed job's "<per key> <key>" line,
-- then a job's result line, follow the actor). The
-- hash field "~args" says up to when (ms) bodies are dropped already, and
-- "~argsat" where the first element after that is in the list (its index
-- plus "~base", how many elements ever went from the list's head): an entry
-- is read again only when its body goes, and a trim reads the list from
-- there, never searching the whole of it (unless the place is wrong: a
-- history from before it was kept). Unless `timed`, only the count is
-- kept. Once over `keep` entries, the oldest go down to a twentieth under it
-- (one settle in many trims, in one step), so no more than `keep` are ever
-- kept (within `budget`). Returns how many entries went.
local function trim_history(hl, hh, now, budget, keep, age, args, timed)
  local went = 0
  if timed and age > 0 then
    local cut = now - age
    local head = redis.call("LINDEX", KEYS[hl], 0)
    local t = head and history_ms(hh, head)
    if head and (not t or t < cut) then
      local n = math.min(budget, redis.call("LLEN", KEYS[hl]))
      went = history_pop(hl, hh, history_seek(hl, hh, 0, n, cut, false))
    end
  end
  if keep > 0 and budget > went then
    -- (the elements that stand for no entry are read only when the list
    -- is over by its elements: see history_overwrites)
    local over = redis.call("LLEN", KEYS[hl]) - keep
    if over > 0 then
      over = over - (tonumber(redis.call("HGET", KEYS[hh], "~stale")) or 0)
    end
    -- once over the count, down to a twentieth under it in one step: never
    -- more than `keep` entries (a read by id sees no other), trimmed once
    -- in many settles
    if over > 0 then over = over + math.floor(keep / 20) end
    -- popping a stale element leaves as many entries: pop on, within the budget
    while over > 0 and budget > went do
      local popped, entries = history_pop(hl, hh, math.min(over, budget - went))
      if popped == 0 then break end
      went = went + popped
      over = over - entries
    end
  end
  if timed and args > 0 and (age == 0 or args < age) then
    local upto = now - args - 1
    local f = redis.call("HMGET", KEYS[hh], "~args", "~argsat", "~base")
    local w = tonumber(f[1]) or 0
    if upto > w then
      local n = redis.call("LLEN", KEYS[hl])
      local base = tonumber(f[3]) or 0
      -- the first element after the mark, at the place kept for it (counted
      -- from the list's first element ever: "~base" went from its head), read
      -- with the element before it and the `budget` after: kept right when
      -- the one before finished by `w` and it after (or the list ends there)
      local from = tonumber(f[2])
      from = from and math.max(0, from - base)
      local off, win = 0, nil
      if from and from <= n then
        off = math.max(0, from - 1)
        win = redis.call("LRANGE", KEYS[hl], off, from + budget)
        local before = from > off and history_ms(hh, win[1])
        local at = win[from - off + 1]
        local t = at and history_ms(hh, at)
        if (before and before > w) or (at and not (t and t > w)) then from = nil end
      else
        from = nil
      end
      if not from then
        -- none kept (a history from before), or not right: looked for
        from = history_seek(hl, hh, 0, n, w, true)
        off = from
        win = redis.call("LRANGE", KEYS[hl], from, from + budget)
      end
      -- win[s] is the element at `from`; at most `budget` are read, up to
      -- the first after `upto`
      local s = from - off + 1
      local e = math.min(#win + 1, s + budget)
      local j = window_seek(hh, win, s, e, upto)
      local more = nil
      if j == e and win[e] then
        -- a full read, more after it: it must end with a ms
        local last = history_ms(hh, win[e - 1])
        if last and history_ms(hh, win[e]) == last then
          -- the next is of the read's last ms: the mark stays before that
          -- ms, read again next time; a read of that ms alone reads all of it
          j = window_seek(hh, win, s, e, last - 1)
          if j > s then
            upto = last - 1
          else
            upto = last
            j = e
            more = history_seek(hl, hh, from + budget, n, last, true)
          end
        elseif last then
          upto = last
        end
      end
      local due = {}
      for k = s, j - 1 do due[#due + 1] = win[k] end
      local to = from + (j - s)
      if more and more > to then
        for _, v in ipairs(redis.call("LRANGE", KEYS[hl], to, more - 1)) do due[#due + 1] = v end
        to = more
      end
      -- a "~<ms> <id>" element's entry only while it is the one of <ms>
      local ids, want = {}, {}
      for j = 1, #due do ids[j], want[j] = history_element(due[j]) end
      local vals = #ids > 0 and many("HMGET", KEYS[hh], ids) or {}
      local set, ns = {}, 0
      for j, v in ipairs(vals) do
        -- (the header's optional words, k<bytes> and r<bytes>, are in `rest`)
        local head, at, bytes, rest = string.match(v or "", "^(h1 %S+ (%d+) %S+ )(%d+)(.*)$")
        bytes = tonumber(bytes)
        if bytes and bytes > 0 and (not want[j] or want[j] == tonumber(at)) then
          local keep = string.sub(rest, 1, #rest - bytes)
          -- the type line, empty while the body was kept, now from the body
          local tail, lines = string.match(keep, "^([^\n]*\n)(.*)$")
          if tail and string.sub(lines, 1, 1) == "\n" then
            keep = tail .. body_type(string.sub(rest, #rest - bytes + 1)) .. lines
          end
          set[ns + 1] = ids[j]
          set[ns + 2] = head .. "0" .. keep
          ns = ns + 2
        end
      end
      set[ns + 1] = "~args"
      set[ns + 2] = string.format("%.0f", upto)
      set[ns + 3] = "~argsat"
      set[ns + 4] = string.format("%.0f", base + to)
      many("HSET", KEYS[hh], set, 3000)
    end
  end
  return went
end

-- Enters job `id`, just taken out of its queue with its body and records
-- (`kept`: HMGET of <id> and <id>:a), in the history (KEYS[hl], KEYS[hh]) as
-- finished `how` (cancelled, deleted) by `by` at `now` with `count`
-- deliveries, its concurrency key `keyed` ("<per key> <key>" or nil) and its
-- priority `prio` (nil: 0), as complete.lua writes entries (a dead one listed
-- as "~<ms> <id>", see history_ms); then trims it by count.
local function enter_history(hl, hh, id, how, count, kept, by, now, keep, age, args, keyed, prio)
  local body = kept[1] or ""
  local typ = body_type(body)
  if args == 0 then body = "" end
  local at = string.format("%.0f", now)
  local kh, kl = "", ""
  if keyed then kh, kl = " k" .. #keyed, keyed .. "\n" end
  history_overwrites(hh, {id})
  redis.call("RPUSH", KEYS[hl], how == "dead" and "~" .. at .. " " .. id or id)
  local ph = (prio and prio ~= 0) and string.format(" p%d", prio) or ""
  redis.call("HSET", KEYS[hh], id, "h1 " .. how .. " " .. at .. " " .. count .. " " .. #body .. ph .. kh .. "\n"
    .. typ .. "\n" .. by .. "\n" .. kl .. (kept[2] or "") .. "\n" .. body)
  trim_history(hl, hh, now, 1001, keep, age, args, false)
end

-- Adds the event "<ms> <what> <count> <by>" to the history's field "~events"
-- (KEYS[hh]), keeping the last 100 (MAX_EVENTS in history.rs).
local function add_history_event(hh, now, what, count, by)
  local lines = {}
  for l in string.gmatch(redis.call("HGET", KEYS[hh], "~events") or "", "[^\n]+") do lines[#lines + 1] = l end
  lines[#lines + 1] = string.format("%.0f %s %.0f ", now, what, count) .. by
  redis.call("HSET", KEYS[hh], "~events", table.concat(lines, "\n", math.max(1, #lines - 99)))
end

-- The flows registered in KEYS[kd] (ns:q:deps, see dep.lua) as waiting for
-- jobs `ids`, taken: for each, "<batch id> <index>,..." or false (as an
-- HMGET of their fields would read them), every registration of theirs
-- dropped. A job's registrations are kept as "<id>" = how many and
-- "<id>:<n>" = "<batch id> <index>" each, so that one more is one write; an
-- "<id>" that holds the list itself (kept so before) is read as it is.
local function take_waiting(kd, ids)
  local heads = many("HMGET", KEYS[kd], ids)
  local out, drop = {}, {}
  for j = 1, #ids do
    local v = heads[j]
    out[j] = v or false
    if v then
      drop[#drop + 1] = ids[j]
      local n = not string.find(v, " ", 1, true) and tonumber(v)
      if n then
        local f = {}
        for k = 1, n do
          f[k] = ids[j] .. ":" .. k
          drop[#drop + 1] = f[k]
        end
        local list = {}
        for _, r in ipairs(many("HMGET", KEYS[kd], f)) do
          if r then list[#list + 1] = r end
        end
        out[j] = #list > 0 and table.concat(list, ",") or false
      end
    end
  end
  if #drop > 0 then many("HDEL", KEYS[kd], drop) end
  return out
end

-- Enters, in the queue's batch finishes (KEYS[kb], ns:q:bout, see complete.lua),
-- jobs `ids` (their bodies `bodies`, nil when gone already) removed from the
-- queue as cancelled (or, `how` "a", as succeeded: popped): those of a
-- batch (their body's last member "batch":"<batch id>:<index>"), and, when
-- `deps` (the hash field "redjob:deps" was set), for each flow registered
-- in KEYS[kd] (ns:q:deps) as waiting for one, whose registration goes.
-- Flags the queue's hash (KEYS[2]) "redjob:bout" unless `flagged`. Appends
-- the finishes entered to `out` and returns it.
local function enter_removed(kb, kd, ids, bodies, deps, flagged, now, out, how)
  local regs = (deps and KEYS[kd]) and take_waiting(kd, ids) or {}
  local z = {}
  local at = string.format("%.0f", now)
  for j, id in ipairs(ids) do
    local body = bodies[j]
    if body then
      local b, idx = string.match(body, '"batch":"(%w+):(%d+)"}%s*$')
      if not b then b, idx = string.match(body, '"batch":"(%w+):(%d+)","batch_done":') end
      local tail = how == "a" and "a" or ("c" .. id)
      if b then
        out[#out + 1] = b .. " " .. idx .. tail
        z[#z + 1] = at; z[#z + 1] = out[#out]
      end
      if regs[j] then
        for wb, widx in string.gmatch(regs[j], "(%w+) (%d+)") do
          out[#out + 1] = wb .. " " .. widx .. tail
          z[#z + 1] = at; z[#z + 1] = out[#out]
        end
      end
    end
  end
  if #z > 0 then
    many("ZADD", KEYS[kb], z)
    if not flagged then redis.call("HSET", KEYS[2], "redjob:bout", at) end
  end
  return out
end


-- A running purge's mark, the queue hash's field "redjob:purging" (`v`, or
-- nil or false), "<cutoff> <until ms> <moves>": the latest cutoff of the
-- purges that run (id prefixes), when the mark lapses (a minute after the
-- last call of a purge of that cutoff: a purge of an earlier one leaves the
-- time as it is, so that a purge that died stops counting moves then), and
-- how many keyed jobs sent up to the cutoff went back to wait (K.wait), or
-- calls of dead_requeue.lua requeued letters sent up to it, or flows'
-- parents of ids up to it were sent (send.lua), or calls of periodic.lua
-- enqueued jobs of ticks up to it, since it was set;
-- a purge scans its sets again while that count changes (see purge.lua). Returns nil when there is none or it lapsed
-- by `now` (whoever finds it so deletes or replaces it), else {cut, until,
-- moves, text(moves)}.
local function purge_mark(v, now)
  local cut, until_ms, moves = string.match(v or "", "^(%S+) (%d+) (%d+)$")
  if not cut or tonumber(until_ms) < now then return nil end
  local m = {cut = cut, until_ms = tonumber(until_ms), moves = tonumber(moves)}
  function m.text(n) return string.format("%s %.0f %.0f", m.cut, m.until_ms, n) end
  return m
end

-- Concurrency keys (see send_keyed.lua and keyed.rs), built by a script that
-- uses them: K = concurrency_keys(kz, kh, zset, now, kw) with the KEYS indexes of the
-- queue's keyed set (ns:q:keyed), its keys hash (ns:q:keys) and its sorted set
-- (ns:q; keyed jobs run at priority 0), KEYS[2] the queue's hash, and
-- optionally of its wake set (ns:q:kwake: keys whose places free at a time,
-- scored by it, see fetch.lua). A keyed job
-- either holds one of its key's places, in the sorted set as any job (workers
-- and RSMQ clients see it), or waits in the keyed set, every score 0, as the
-- member "<key>\0<due ms, 16 digits><count, 3 digits><id>" (ordered by key,
-- then due), apart from RSMQ's sorted set. The keys hash has "<per key> <id>
-- ..." (the holders) for each key with holders or waiting jobs (a holder
-- "<id>~<ms>" is a running job deleted or cancelled: its handler stops at its
-- next lease renewal, so it keeps its place until its lease ends at <ms>,
-- `now` the call's clock; a word "@<ms>" says that a handler throttled the
-- key until then: none of its jobs takes a place before); a keyed job's
-- hash field "<id>:k" is "<19 digits><key>", the digits its member's while it
-- waits. The hash field "redjob:keyed" says that the queue had keyed jobs.
-- (ZRANGE BYLEX rather than ZRANGEBYLEX: the worker ACL rule grants ZRANGE.)
--   K.get(key): the key's entry {per, holders, scores, freed} (holders checked
--     once a call: those no longer in the sorted set, deleted by an RSMQ
--     client or taken by a pop, are dropped; `freed` says so, or that K.per
--     raised the places: the key's waiting jobs may take them);
--   K.wait(key, score, id): enters a job in the keyed set; while a purge
--     runs (the hash field "redjob:purging", see purge_mark), one sent up to
--     its cutoff that goes back to wait is counted in that field, so that the
--     purge scans again for it (a lapsed mark is deleted); K.mark, when set,
--     is that field as the caller read it already (false: none), rather
--     than read again;
--   K.first(key): the key's first waiting member and its 19 digits, or nil;
--   K.fill(key): promotes the key's first waiting jobs while it has places
--     (those without a body are dropped), returns how many;
--   K.left(id, key): a holder left its place (or held none);
--   K.hold(key, score, id): a job takes a place (enters the sorted set);
--   K.demote(key, score, id): a holder goes back to wait;
--   K.place(key, score, id): a job enters its key (a send, a requeue): a free
--     place, else the place of a later holder that does not run, else waits;
--   K.batch: when set (a send), K.hold and K.wait write at K.save, in a few
--     commands for the whole call;
--   K.per(key, n): sets the key's places;
--   K.gone(ids, running, at): jobs that leave the queue (their holders' places are
--     filled, their waiting members removed, their "<id>:k" fields deleted);
--     `running` (optional) maps the ids of leased jobs deleted while their
--     lease runs to its end (ms): they keep their places until then; `at`
--     (optional) their "<id>:k" fields, read already; returns
--     how many waited, how many were promoted, and the ids' keys (id -> key);
--   K.yield(key, score, id): a holder that goes back to wait for a retry (or
--     a release) at `score` gives its place to the key's first waiting job
--     when that one is due before it; returns how many were promoted;
--   K.throttle(key, until_ms, spare): a handler throttled the key: none of
--     its jobs takes a place until then, and its holders that do not run
--     (but those in the set `spare`, the call's throttled ones) wait again;
--   K.rewake(key): enters the key's next timed event (a ghost's lease end, a
--     throttle's end) in the wake set;
--   K.save(): writes the entries changed.
local function concurrency_keys(kz, kh, zset, now, kw)
  local K, entries, changed = {}, {}, {}
  -- keys whose places free at a time (a ghost's lease end, a throttle's end),
  -- entered in the wake set (KEYS[kw], ns:q:kwake, when given): fetches fill
  -- them then and wake their workers for it
  local wakes = {}
  -- running jobs K.gone is deleting: still holders when their key is read
  local pending = {}
  local function digits(score)
    local n = tonumber(score)
    local ms = math.floor(n)
    return string.format("%016.0f%03d", ms, math.floor((n - ms) * 1000 + 0.5))
  end
  -- keys' entries read already (key -> the hash's value, or false)
  K.known = {}
  function K.get(key)
    local e = entries[key]
    if e then return e end
    local v = K.known[key]
    if v == nil then v = redis.call("HGET", KEYS[kh], key) end
    -- fresh: the key has no entry (no jobs)
    e = {per = 1, holders = {}, scores = {}, fresh = not v}
    if v then
      local ids = {}
      for w in string.gmatch(v, "%S+") do ids[#ids + 1] = w end
      e.per = tonumber(table.remove(ids, 1)) or 1
      -- deleted running jobs keep their places until their leases end
      local live = {}
      for _, w in ipairs(ids) do
        local ends = tonumber(string.match(w, "~(%d+)$"))
        local held = tonumber(string.match(w, "^@(%d+)$"))
        if held then
          if held > now then
            e.until_ms = held
          else
            changed[key] = true
            e.freed = true
          end
        elseif not ends then
          live[#live + 1] = w
        elseif ends >= now then
          e.holders[#e.holders + 1] = w
        else
          changed[key] = true
          e.freed = true
        end
      end
      ids = live
      if #ids > 0 then
        local at = many("ZMSCORE", KEYS[zset], ids)
        local alive = 0
        for j, id in ipairs(ids) do
          if at[j] or pending[id] then
            e.holders[#e.holders + 1] = id
            e.scores[id] = tonumber(at[j])
            alive = alive + 1
          end
        end
        if alive ~= #ids then
          changed[key] = true
          e.freed = true
          -- their key fields go with them
          local gone = {}
          for j, id in ipairs(ids) do
            if not at[j] then gone[#gone + 1] = id .. ":k" end
          end
          many("HDEL", KEYS[2], gone)
        end
      end
    end
    entries[key] = e
    return e
  end
  -- a send's writes, made at K.save when K.batch is set: holders to add to
  -- the sorted set (id -> score), members to add to the keyed set, fields
  local held, waits, fields = {}, {}, {}
  -- the running purges' mark, read at the first wait of a call (false: none)
  local purging
  function K.wait(key, score, id)
    local d = digits(score)
    if purging == nil then
      local v = K.mark
      if v == nil then v = redis.call("HGET", KEYS[2], "redjob:purging") end
      purging = purge_mark(v, now) or false
      -- a purge that died left its mark: it counts nothing now
      if v and not purging then redis.call("HDEL", KEYS[2], "redjob:purging") end
    end
    if purging and not purging.moved and string.sub(id, 1, 10) <= purging.cut then
      purging.moved = true
      redis.call("HSET", KEYS[2], "redjob:purging", purging.text(purging.moves + 1))
    end
    if K.batch then
      waits[#waits + 1] = 0
      waits[#waits + 1] = key .. "\0" .. d .. id
      fields[#fields + 1] = id .. ":k"
      fields[#fields + 1] = d .. key
    else
      redis.call("ZADD", KEYS[kz], 0, key .. "\0" .. d .. id)
      redis.call("HSET", KEYS[2], id .. ":k", d .. key)
    end
    changed[key] = true
  end
  -- a holder goes back to wait (its score `score`, a number)
  function K.demote(key, score, id)
    if held[id] then held[id] = nil else redis.call("ZREM", KEYS[zset], id) end
    K.left(id, key)
    K.wait(key, score, id)
  end
  function K.first(key)
    local m = redis.call("ZRANGE", KEYS[kz], "[" .. key .. "\0", "(" .. key .. "\1", "BYLEX", "LIMIT", 0, 1)[1]
    if not m then return nil end
    return m, string.sub(m, #key + 2, #key + 20)
  end
  function K.fill(key)
    local e = K.get(key)
    local n = 0
    if (e.until_ms or 0) > now then return 0 end
    -- two rounds at most: orphans (no body) are dropped, and the rest waits
    -- for the key's next event or the fetches' sweep
    for _ = 1, 2 do
      local want = e.per - #e.holders
      if want <= 0 then break end
      local ms = redis.call("ZRANGE", KEYS[kz], "[" .. key .. "\0", "(" .. key .. "\1", "BYLEX", "LIMIT", 0, want)
      if #ms == 0 then break end
      local ids = {}
      for j, m in ipairs(ms) do ids[j] = string.sub(m, #key + 21) end
      local bodies = many("HMGET", KEYS[2], ids)
      local z, orphans = {}, {}
      for j, m in ipairs(ms) do
        if bodies[j] then
          local d = string.sub(m, #key + 2, #key + 20)
          local score = string.format("%.0f.%s", tonumber(string.sub(d, 1, 16)), string.sub(d, 17, 19))
          z[#z + 1] = score
          z[#z + 1] = ids[j]
          e.holders[#e.holders + 1] = ids[j]
          e.scores[ids[j]] = tonumber(score)
          n = n + 1
        else
          orphans[#orphans + 1] = ids[j] .. ":k"
        end
      end
      many("ZREM", KEYS[kz], ms)
      if #z > 0 then many("ZADD", KEYS[zset], z) end
      if #orphans > 0 then
        many("HDEL", KEYS[2], orphans)
        for j, f in ipairs(orphans) do orphans[j] = string.sub(f, 1, -3) end
        forget_released(orphans)
      end
      changed[key] = true
    end
    return n
  end
  function K.hold(key, score, id)
    local e = K.get(key)
    if K.batch then
      held[id] = score
      fields[#fields + 1] = id .. ":k"
      fields[#fields + 1] = digits(score) .. key
    else
      redis.call("ZADD", KEYS[zset], score, id)
      redis.call("HSET", KEYS[2], id .. ":k", digits(score) .. key)
    end
    e.holders[#e.holders + 1] = id
    e.scores[id] = tonumber(score)
    changed[key] = true
  end
  -- a job due at `score` (text) enters its key: a free place if there is
  -- one, else the place of a holder due after it that does not run (not
  -- leased, nor received by an RSMQ client: no "<id>:rc"), which waits again:
  -- within a key, jobs start in order of due time; else it waits
  function K.place(key, score, id)
    local e = K.get(key)
    -- places freed by holders an RSMQ client deleted, or added: the key's
    -- waiting jobs, due before this one, take them first
    if e.freed then
      e.freed = false
      K.fill(key)
    end
    if (e.until_ms or 0) > now then
      -- a handler throttled the key: the job waits
      K.wait(key, score, id)
    elseif #e.holders < e.per then
      K.hold(key, score, id)
    else
      local late, late_s
      local s = tonumber(score)
      for _, h in ipairs(e.holders) do
        local hs = e.scores[h]
        if hs and hs > s and not select(2, score_count(hs)) and (not late or hs > late_s or (hs == late_s and h > late))
          and redis.call("HEXISTS", KEYS[2], h .. ":rc") == 0 then
          late, late_s = h, hs
        end
      end
      if late then K.demote(key, late_s, late) end
      -- a send that lowered the key's places may leave more holders than
      -- places: the job then waits all the same
      if late and #e.holders < e.per then
        K.hold(key, score, id)
      else
        K.wait(key, score, id)
      end
    end
  end
  function K.per(key, n)
    local e = K.get(key)
    if e.per ~= n then
      if n > e.per then e.freed = true end
      e.per = n
      changed[key] = true
    end
  end
  function K.throttle(key, until_ms, spare)
    local e = K.get(key)
    e.until_ms = math.max(e.until_ms or 0, until_ms)
    wakes[key] = math.min(wakes[key] or math.huge, e.until_ms)
    -- its holders that do not run wait again (the throttled jobs, `spare`,
    -- keep their places: they are due when their throttles end)
    local others = {}
    for _, h in ipairs(e.holders) do
      local hs = e.scores[h]
      if not spare[h] and hs and not select(2, score_count(hs)) then others[#others + 1] = h end
    end
    for _, h in ipairs(others) do K.demote(key, e.scores[h], h) end
    changed[key] = true
  end
  function K.left(id, key)
    local e = K.get(key)
    for j, h in ipairs(e.holders) do
      if h == id then
        table.remove(e.holders, j)
        e.scores[id] = nil
        changed[key] = true
        return
      end
    end
  end
  function K.yield(key, score, id)
    -- under a throttle of its key, a holder that goes back waits (the key's
    -- throttled jobs alone keep their places)
    if (K.get(key).until_ms or 0) > now then
      K.demote(key, tonumber(score), id)
      return 0
    end
    local m, d = K.first(key)
    if not m or d >= digits(score) then return 0 end
    redis.call("ZREM", KEYS[zset], id)
    K.left(id, key)
    K.wait(key, score, id)
    return K.fill(key)
  end
  function K.gone(ids, running, at)
    running = running or {}
    pending = running
    local fields = {}
    for j, id in ipairs(ids) do fields[j] = id .. ":k" end
    at = at or many("HMGET", KEYS[2], fields)
    local waited, keys, drop, of = 0, {}, {}, {}
    for j, id in ipairs(ids) do
      local v = at[j]
      if v then
        local key = string.sub(v, 20)
        of[id] = key
        drop[#drop + 1] = fields[j]
        if redis.call("ZREM", KEYS[kz], key .. "\0" .. string.sub(v, 1, 19) .. id) == 1 then
          waited = waited + 1
        elseif running[id] then
          -- its handler runs on until its lease renewal: the place is kept
          local e = K.get(key)
          for j, h in ipairs(e.holders) do
            if h == id then e.holders[j] = string.format("%s~%.0f", id, running[id]) end
          end
          wakes[key] = math.min(wakes[key] or math.huge, running[id] + 1)
        else
          K.left(id, key)
        end
        keys[key] = true
      end
    end
    local promoted = 0
    for key in pairs(keys) do
      changed[key] = true
      promoted = promoted + K.fill(key)
    end
    if #drop > 0 then many("HDEL", KEYS[2], drop) end
    return waited, promoted, of
  end
  -- enters the key's next event in the wake set, if it has one: a ghost's
  -- lease end, its throttle's end
  function K.rewake(key)
    local e = K.get(key)
    local at = (e.until_ms or 0) > now and e.until_ms or math.huge
    for _, h in ipairs(e.holders) do
      local ends = tonumber(string.match(h, "~(%d+)$"))
      if ends then at = math.min(at, ends + 1) end
    end
    if at < math.huge then wakes[key] = math.min(wakes[key] or math.huge, at) end
  end
  function K.save()
    if kw then
      -- the earliest event of a key is kept (LT): the fetch that handles it
      -- enters the key's next (K.rewake)
      for key, at in pairs(wakes) do
        redis.call("ZADD", KEYS[kw], "LT", string.format("%.0f", at), key)
      end
      wakes = {}
    end
    if K.batch then
      local z = {}
      for id, score in pairs(held) do
        z[#z + 1] = score
        z[#z + 1] = id
      end
      many("ZADD", KEYS[zset], z)
      many("ZADD", KEYS[kz], waits)
      many("HSET", KEYS[2], fields)
      held, waits, fields = {}, {}, {}
    end
    local set = {}
    for key in pairs(changed) do
      local e = K.get(key)
      if #e.holders == 0 and not K.first(key) then
        redis.call("HDEL", KEYS[kh], key)
      else
        set[#set + 1] = key
        local v = e.per .. (#e.holders > 0 and " " .. table.concat(e.holders, " ") or "")
        if (e.until_ms or 0) > now then v = v .. string.format(" @%.0f", e.until_ms) end
        set[#set + 1] = v
      end
    end
    if #set > 0 then many("HSET", KEYS[kh], set) end
    changed = {}
  end
  return K
end
