-- Settles finished deliveries in one call: acks, reschedules (retry with backoff, or
-- release at shutdown) and dead letters. Each acts only if the job's score still
-- equals the delivery's token (fencing): a worker whose lease expired cannot touch
-- the newer delivery.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  dead letters' sorted set (ns:q:dead)
-- KEYS[4]  dead letters' hash (ns:q:dead:Q)
-- KEYS[5]  the queue's counters (ns:q:stats); its fields "m0".."m60" are a ring of
--          the last hour's minutes: "m<minute % 61>" = "<minute> <processed>
--          <failed>" (minute: Unix ms / 60000), and "h0".."h168" one of the last
--          week's hours, "h<hour % 169>" = "<hour> <processed> <failed>" (hour:
--          Unix ms / 3600000); a call reads and writes the hash once. Once
--          the hash holds more than 128 fields (a few days of hours), the
--          first settle of each hour also writes its field "redjob:table", a
--          value longer than Redis keeps in a listpack (64 bytes by
--          default), so that the hash is a hash table from then on: a
--          listpack is searched field by field, and the overview reads 173
--          of its fields a queue (BENCHMARKS.md, Speed II part 19)
-- KEYS[6]  the queue's unique keys (ns:q:unique): acked and dead jobs free theirs
-- KEYS[7]  the queue's lease counts (ns:q:leases): a settled lease leaves them
--          (see lease_counts in lib.lua)
-- KEYS[8], KEYS[9]  the queue's history (its list ns:q:history:ids and its hash
--          ns:q:history:Q, see history.rs and trim_history in lib.lua): acked
--          and dead-lettered jobs are entered there with their attempt
--          records, type and body, and the history trimmed
-- KEYS[10], KEYS[11]  the queue's keyed set and concurrency keys (ns:q:keyed,
--          ns:q:keys, see concurrency_keys in lib.lua): an acked or dead job
--          frees its key's place for the key's next job; one that goes back
--          to wait (a retry, a release, a throttle) gives its place to the
--          key's first waiting job when that one is due before it
-- KEYS[12]  the queue's wake set (ns:q:kwake, see fetch.lua): a key's
--          throttle enters the key there, due when it ends
-- KEYS[13]  the queue's awaited jobs (ns:q:awaited, see await.lua): an acked
--          or dead-lettered one's id is published on the done channel (ns:@done:q)
-- KEYS[14]  the queue's batch finishes (ns:q:bout, see batches.rs): the acked
--          and dead-lettered jobs of a batch enter it, one member per batch
--          and call, "<batch id> <index>a,<index>d<id>,..." ("a" succeeded,
--          "d" dead, with its id), scored now, for their batch to count
--          (batch.lua, another slot on a Cluster); the hash field
--          "redjob:bout" says since when some may wait (fetch.lua reports it
--          once they wait too long); "<index>r" is an ack whose result waits
--          in KEYS[15] for its batch to hold it
-- KEYS[15]  the queue's batch results (ns:q:bres): "<batch id> <index>" -> the
--          result, until its batch holds it (bout.lua forgets it then)
-- KEYS[16]  the queue's waited-for jobs (ns:q:deps, see dep.lua): an acked or
--          dead-lettered job registered there is a job of each batch it names
--          ("<batch id> <index>,..."), its finish entered in KEYS[14] as a
--          batch job's, and its registration dropped (the hash field
--          "redjob:deps" says some may be registered)
-- ARGV[1], ARGV[2], ARGV[3]  number of acks A (followed by "b" when each ack
--          carries its body, see below), reschedules R, dead letters D
-- ARGV[4]  the jobs' priority (KEYS[1] is that level's sorted set): dead letters
--          keep it in <id>:p of their hash, for a requeue
-- ARGV[5], ARGV[6]  dead-letter retention: the most letters the queue keeps, and
--          their longest age in ms ("0": no limit), the worker's; the queue's
--          stored ones (hash field "redjob:dead_letters", see settings.lua) are
--          in force over them. A call that dead-letters
--          drops the oldest beyond either (at most D + 1000 per call, so that
--          lowering a limit frees the rest over the next calls)
-- ARGV[7]  the queue's realtime channel (ns:rt:q): a release while a worker
--          waits for the queue (hash field "redjob:waiting") wakes it, as a send
--          would (a hand-off its worker could not start, a shutdown's releases),
--          and so does any settle while a fetch waits for a place under the
--          queue's global concurrency (hash field "redjob:held", see fetch.lua)
-- ARGV[8]  who ran the attempts, as JSON members to add to each record
--          (`,"worker":"…","host":"…"`), or ""
-- ARGV[9]  the history setting when the queue stores none (its hash field
--          "redjob:history", see history_setting in lib.lua)
-- ARGV[10]  the number of job types K the run times below name, then the K
--          type names (ARGV[11 .. 10 + K])
-- then, when A > 0, the acks in runs of one token (a fetch's jobs share
--      theirs, so a token comes once for many acks): the number of runs,
--      then each run's token, its number of acks n and n x (id, span[,
--      body]): span is the run's times as members of its
--      attempt record, ',"start":<ms>,"end":<ms>', or "" when unknown; body
--      (only when ARGV[1] is "<A>b") the job's body as delivered, which the
--      history keeps instead of reading it here, or "" (read here); R x (id, token, delay ms, delivery count to keep,
--      "r" for a retry, "l" for a release, "t<limit>" for a throttle or "k<limit>" for a throttle of
--      the job's concurrency key alone, error or "", attempt record or
--      "": a release has one only when its handler ran), D x (id, token, error, attempt record), then the entries'
--      run-time codes: a code is 32 x (type's index among the K, from 1) +
--      the bucket of its run time (see RUN_TIME_BUCKETS_MS in stats.rs); an
--      entry has none when its run is unknown or a release. They come as the
--      number of distinct codes C, C x (code, how many entries have it), then
--      every entry's code in the entries' order, separated by spaces, "-" for
--      none (read only when an entry fails the fence: it is not counted).
--      Each entry that passes the fence adds 1 to "rt:<bucket>:<type>" of
--      the counters hash (KEYS[5]): per job type, a fixed-size histogram of
--      run times; then, optionally, the number
--      of results N and N x (id, result): the JSON an ack's handler returned,
--      kept with its history entry (header word "r<bytes>", see history.rs);
--      then, optionally, the number of batches B and B x (batch id, its
--      acks' and dead letters' finishes "<index>a,<index>r,<index>d<id>,..."
--      ("r": an ack with a result), their entries' places among all entries "<k>,<k>,..." in the same order)
-- An attempt record (one line of JSON, see attempts.rs) is added to the job's
-- records in "<id>:a" (keeping the last MAX_RECORDS): a retry's in the queue's
-- hash, a dead letter's moved to the dead letters' hash with them. An ack
-- deletes them when its job was delivered before (its count over 1, or the
-- queue has seen a throttle or a recorded release, which give a count back
-- with their record kept): only then may it have some. A last error or records left at delivery 1
-- otherwise (an RSMQ client's changeMessageVisibility after a retry, or a
-- caller of `Backend::settle` that keeps an error on a release) stay until
-- fetch.lua's sweep finds their job gone. The hash field "redjob:errors"
-- says that "<id>:err" or "<id>:a" fields may exist.
-- A throttle (kind "t<limit>", a handler's JobError::rate_limited) goes back as
-- a release does, with its attempt record (outcome throttled) and its error
-- kept, unless its job's last `limit` records are throttles: then it counts,
-- as a retry. Either way its queue starts no job until its delay ends (hash
-- field "redjob:throttled", see fetch.lua).
-- A release gives the delivery count back (the delivery does not count as an
-- attempt) and keeps the delivery's lease end in "<id>:l", counted in the hash
-- field "redjob:released": the next fetch leases it until later than that, so the
-- next token differs from this one (see fetch.lua). A release of a run whose
-- handler ran (shutdown past the grace period) comes with its attempt record
-- (outcome released), kept as a throttle's is (and "redjob:throttles" set);
-- one that never started comes without and records nothing.
-- A retry's error is kept as the job's last error in <id>:err of the queue's
-- hash (for inspection), and the hash field "redjob:errors" says that some may
-- exist: acks and dead letters then delete theirs.
-- Returns {acked, rescheduled, dead, gone...}: how many passed the fence, then the
-- ids that failed it because the message no longer exists (deleted while it ran,
-- or settled already); the other failures were delivered again; then the
-- batch finishes entered in KEYS[14] (each has a space, an id has none)
-- (globals read in the per-job loops, as locals)
local ARGV, floor, format = ARGV, math.floor, string.format
-- (a "b" after the count of acks: each ack carries its body)
local na, with_bodies = string.match(ARGV[1], "^(%d+)(b?)$")
na, with_bodies = tonumber(na), with_bodies == "b"
local nr, nd = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock()
local ids, tokens, kind, arg = {}, {}, {}, {}
local prio, keep, max_age = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local ntypes = tonumber(ARGV[10])
local i = 11 + ntypes
-- each ack's span; the entries' bodies, first those the caller sent (see
-- above), the rest read below
local spans, bodies = {}, {}
-- the entries so far (a count: `#t` searches the table on every append)
local nids = 0
if na > 0 then
  local nruns = tonumber(ARGV[i]) or 0
  i = i + 1
  for _ = 1, math.min(nruns, na) do
    local tok, n = ARGV[i], tonumber(ARGV[i + 1]) or 0
    -- (runs that do not add up to the acks' count would misread every
    -- argument after them: refused before any write)
    if n < 1 or nids + n > na then return redis.error_reply("ERR settle: the acks' runs do not add up to " .. na) end
    i = i + 2
    for _ = 1, n do
      nids = nids + 1
      ids[nids] = ARGV[i]; tokens[nids] = tok; kind[nids] = "a"
      spans[nids] = ARGV[i + 1]
      if with_bodies then
        local b = ARGV[i + 2]
        if b ~= "" then bodies[nids] = b end
        i = i + 3
      else
        i = i + 2
      end
    end
  end
  if nids ~= na then return redis.error_reply("ERR settle: the acks' runs do not add up to " .. na) end
end
local errs, recs = {}, {}
-- throttles ("t<limit>"): the limit of uncounted throttles in a row, and
-- their delays (ms), by entry
local throttled, delays = {}, {}
-- throttles of a job's concurrency key alone ("k<limit>"): its key waits, not
-- its queue (a job without a key: its queue)
local keyscope = {}
for _ = 1, nr do
  nids = nids + 1
  ids[nids] = ARGV[i]; tokens[nids] = ARGV[i + 1]; kind[nids] = ARGV[i + 4]
  arg[nids] = string.format("%d.%03d", now + tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
  if ARGV[i + 5] ~= "" then errs[nids] = ARGV[i + 5] end
  if ARGV[i + 6] ~= "" then recs[nids] = ARGV[i + 6] end
  local c1 = string.sub(ARGV[i + 4], 1, 1)
  if c1 == "t" or c1 == "k" then
    throttled[nids] = tonumber(string.sub(ARGV[i + 4], 2)) or 20
    delays[nids] = tonumber(ARGV[i + 2])
    if c1 == "k" then keyscope[nids] = true end
  end
  i = i + 7
end
for _ = 1, nd do
  nids = nids + 1
  ids[nids] = ARGV[i]; tokens[nids] = ARGV[i + 1]; kind[nids] = "d"
  arg[nids] = ARGV[i + 2]
  if ARGV[i + 3] ~= "" then recs[nids] = ARGV[i + 3] end
  i = i + 4
end
if nids == 0 then return {0, 0, 0} end
-- the entries' run-time codes follow them (C, C pairs, each entry's), then
-- the acks' results
local codes = i
local after = codes + 2 * (tonumber(ARGV[codes]) or 0) + 2
local results = {}
local nres = tonumber(ARGV[after]) or 0
for j = 1, nres do
  local at = after + 2 * j - 1
  results[ARGV[at]] = ARGV[at + 1]
end
-- the batches' groups: (batch id, its finishes as entered, their entries)
local bgroups = {}
local bat = after + 2 * nres + 1
for j = 1, tonumber(ARGV[bat]) or 0 do
  local at = bat + 3 * j - 2
  bgroups[j] = {ARGV[at], ARGV[at + 1], ARGV[at + 2]}
end
local passed = {}
-- RSMQ-style receives write "<id>:rc" and "<id>:fr"; delete those only when such
-- receives ever happened on the queue (see fetch.lua)
-- with them, when the worker's history setting is on, the bodies of the acks
-- and dead letters the caller did not send (read in the same command: the
-- history keeps them)
local read = {"totalrecv", "redjob:leased", "redjob:unique", "redjob:errors",
  "redjob:waiting", "redjob:released", "redjob:dead_letters", "redjob:history", "redjob:htrim", "redjob:held",
  "redjob:throttles", "redjob:throttled", "redjob:keyed", "redjob:awaited", "redjob:bout", "redjob:deps",
  "redjob:requeued", "redjob:purging"}
local pre = string.sub(ARGV[9], 1, 1) == "1"
-- the bodies, when read, follow the fields
local nfields = #read
if pre then
  for k = 1, nids do
    if not bodies[k] and (kind[k] == "a" or kind[k] == "d") then read[#read + 1] = ids[k] end
  end
end
local attrs = many("HMGET", KEYS[2], read)
if pre then
  local j = nfields
  for k = 1, nids do
    if not bodies[k] and (kind[k] == "a" or kind[k] == "d") then
      j = j + 1
      bodies[k] = attrs[j]
    end
  end
end
-- the queue's stored retention, "<count> <age ms>", is in force over the worker's
-- (anything else there is ignored, as QueueSettings::decode does, a number
-- past a u64 too)
local stored_keep, stored_age = string.match(attrs[7] or "", "^(%d+) (%d+)$")
if stored_keep and fits(stored_keep, U64) and fits(stored_age, U64) then
  keep, max_age = tonumber(stored_keep), tonumber(stored_age)
end
local foreign = (tonumber(attrs[1]) or 0) ~= (tonumber(attrs[2]) or 0)
-- a throttle goes back as a release (the delivery given back, "<id>:l" kept),
-- unless its job's last records are `limit` throttles in a row: then it counts,
-- as a retry. Its records are read here (a job whose count was given back
-- may have some at delivery 1).
local pre_logs = {}
local throttle_ks = {}
for k in pairs(throttled) do throttle_ks[#throttle_ks + 1] = k end
if #throttle_ks > 0 then
  local f = {}
  for j, k in ipairs(throttle_ks) do f[j] = ids[k] .. ":a" end
  local old = many("HMGET", KEYS[2], f)
  for j, k in ipairs(throttle_ks) do
    pre_logs[k] = old[j] or false
    local run = 0
    for line in string.gmatch(old[j] or "", "[^\n]+") do
      if string.find(line, '"outcome":"throttled"', 1, true) then run = run + 1 else run = 0 end
    end
    if run >= throttled[k] then
      kind[k] = "r"
      local c = select(1, score_count(tonumber(tokens[k])))
      arg[k] = string.format("%d.%03d", now + delays[k], math.min(c, MAX_COUNT))
    else
      kind[k] = "l"
    end
  end
end
-- each token as a number, parsed once a call (a fetch's jobs share theirs:
-- parsing a score costs more than the rest of a job's fence)
local numbers = {}
local function token_number(tok)
  local t = numbers[tok]
  if not t then
    t = tonumber(tok)
    numbers[tok] = t
  end
  return t
end
-- records may exist at delivery 1 once a throttle gave a count back
local throttles_seen = attrs[11] == "1"
local function earlier(k)
  return attrs[4] and (throttles_seen or score_count(token_number(tokens[k])) > 1)
end
local h_on, h_keep, h_age, h_args = history_setting(attrs[8], ARGV[9])
-- the record of ack k's attempt (ARGV[8]: who ran it)
local function ok_record(k)
  return '{"n":' .. score_count(token_number(tokens[k])) .. (spans[k] or "") .. ',"outcome":"ok"' .. ARGV[8] .. "}"
end
-- the acked and dead-lettered entries (indexes), entered in the history
local finished = {}
local scores = many("ZMSCORE", KEYS[1], ids)
local gone, z, dead, missing, errfields, lfields = {}, {}, {}, {}, {}, {}
-- the fields the jobs that leave take from the queue's hash: their bodies
-- alone (`gone` itself) unless RSMQ-style receives or kept errors may have
-- left others
local errors = attrs[4]
local plain = not foreign and not errors
local fields = plain and gone or {}
local acked, retried, released, counted = 0, 0, 0, 0
-- the entries whose attempt record is added (retries and dead letters that
-- passed the fence), and their records so far ("<id>:a")
local logged, logs = {}, {}
-- the acks that may have earlier records (see earlier), read after the loop
local maybe, nmaybe = {}, 0
-- leases settled, by lease end (ms): most of a call's share one; counted by
-- token in the loop (a fetch's jobs share theirs), then by lease end
local ends, settled = {}, {}
-- until when a throttle that passed holds the queue (ms; 0: none); the key
-- throttles that passed, id -> until when
local throttle_until = 0
local key_throttles, any_key_throttle = {}, false
-- a release (or a throttle) that passed kept its record at a delivery count
-- given back (see "redjob:throttles" below)
local uncounted_recs = false
-- the lengths of gone, fields and finished (appended to once or more a job)
local ng, nf, nfin = 0, 0, 0
-- the entries that passed the fence; their ids (an id named twice passes
-- once, its first entry: once settled, its job's token no longer matches)
local npassed, passed_ids = 0, {}
for k = 1, nids do
  local id = ids[k]
  local tok = tokens[k]
  -- a score that reads as its token passes without being parsed
  local sc = scores[k]
  if sc and not passed_ids[id] and (sc == tok or tonumber(sc) == token_number(tok)) then
    local kd = kind[k]
    passed[k] = true
    passed_ids[id] = true
    npassed = npassed + 1
    settled[tok] = (settled[tok] or 0) + 1
    if kd == "a" or kd == "d" then
      ng = ng + 1
      gone[ng] = id
      if not plain then
        nf = nf + 1
        fields[nf] = id
        if foreign then
          fields[nf + 1] = id .. ":rc"
          fields[nf + 2] = id .. ":fr"
          nf = nf + 2
        end
        -- a last error and records: an acked job has them only when it was
        -- delivered before (see earlier and the header); a dead letter's are
        -- always deleted (it may be requeued under its id)
        if errors and (kd == "d" or earlier(k)) then
          fields[nf + 1] = id .. ":err"
          fields[nf + 2] = id .. ":a"
          nf = nf + 2
        end
      end
      if kd == "d" and recs[k] then logged[#logged + 1] = k end
      if h_on then
        nfin = nfin + 1
        finished[nfin] = k
        if errors and kd == "a" and earlier(k) then
          -- earlier records may exist: read below (see maybe)
          nmaybe = nmaybe + 1
          maybe[nmaybe] = k
        end
      end
      if kd == "a" then acked = acked + 1 else dead[#dead + 1] = k end
    else
      z[#z + 1] = arg[k]
      z[#z + 1] = id
      if errs[k] then
        errfields[#errfields + 1] = id .. ":err"
        errfields[#errfields + 1] = errs[k]
      end
      if recs[k] then logged[#logged + 1] = k end
      if throttled[k] and keyscope[k] then
        key_throttles[id] = now + delays[k]
        any_key_throttle = true
      elseif throttled[k] then
        throttle_until = math.max(throttle_until, now + delays[k])
      end
      if kd == "r" and throttled[k] then
        -- a throttle past its limit in a row: its delivery counts, but it
        -- failed nothing (its record, hooks and metrics say throttled)
        counted = counted + 1
      elseif kd == "r" then
        retried = retried + 1
      else
        released = released + 1
        lfields[#lfields + 1] = id .. ":l"
        lfields[#lfields + 1] = string.match(tokens[k], "^%d+")
        -- its record kept at a delivery count given back
        if recs[k] then uncounted_recs = true end
      end
    end
  elseif not scores[k] then
    missing[#missing + 1] = id
  end
end
for tok, n in pairs(settled) do
  local e = floor(token_number(tok))
  ends[e] = (ends[e] or 0) - n
end
-- an ack with earlier records has its own added to them (logged); one
-- without (most, once a queue has seen a throttle or a recorded release,
-- which make every ack at delivery 1 look) is written straight into its
-- history entry, as if it had not looked
if nmaybe > 0 then
  local f = {}
  for j = 1, nmaybe do f[j] = ids[maybe[j]] .. ":a" end
  local old = many("HMGET", KEYS[2], f)
  for j = 1, nmaybe do
    local k = maybe[j]
    if old[j] then
      pre_logs[k] = old[j]
      recs[k] = ok_record(k)
      logged[#logged + 1] = k
    end
  end
end
if #logged > 0 then
  -- earlier records exist only for a job delivered before, and only once the
  -- flag is set
  local want, at = {}, {}
  for _, k in ipairs(logged) do
    if pre_logs[k] ~= nil then
      logs[k] = pre_logs[k] or nil
    elseif earlier(k) then
      want[#want + 1] = ids[k] .. ":a"
      at[#want] = k
    end
  end
  local old = #want > 0 and many("HMGET", KEYS[2], want) or {}
  for j, k in pairs(at) do logs[k] = old[j] end
  for _, k in ipairs(logged) do
    logs[k] = append_attempt(logs[k], recs[k])
    if kind[k] == "r" or kind[k] == "l" then
      errfields[#errfields + 1] = ids[k] .. ":a"
      errfields[#errfields + 1] = logs[k]
    end
  end
end
-- the bodies the dead letters and the history keep, unless read or sent
-- already
local need = h_on and finished or dead
if #need > 0 and not pre then
  local bid, at = {}, {}
  for _, k in ipairs(need) do
    if not bodies[k] then
      bid[#bid + 1] = ids[k]
      at[#bid] = k
    end
  end
  local got = many("HMGET", KEYS[2], bid)
  for j, k in ipairs(at) do bodies[k] = got[j] end
end
-- the keys of the jobs that leave (keyed jobs run at priority 0), "<per
-- key> <key>": the dead letters and the history keep them (a requeue, a
-- rerun waits for its key again); read apart from the keys' entries K reads
-- below, after the call's retries are rescored
local keyof, kat, known = {}, nil, {}
if attrs[13] and prio == "0" and #gone > 0 and (#dead > 0 or #finished > 0) then
  local kf = {}
  for j, id in ipairs(gone) do kf[j] = id .. ":k" end
  kat = many("HMGET", KEYS[2], kf)
  local names, per = {}, {}
  for j = 1, #gone do
    local v = kat[j]
    if v and not per[string.sub(v, 20)] then
      per[string.sub(v, 20)] = "1"
      names[#names + 1] = string.sub(v, 20)
    end
  end
  if #names > 0 then
    local e = many("HMGET", KEYS[11], names)
    for j, key in ipairs(names) do
      per[key] = e[j] and string.match(e[j], "^%d+") or "1"
      known[key] = e[j]
    end
  end
  for j, id in ipairs(gone) do
    local v = kat[j]
    if v then keyof[id] = per[string.sub(v, 20)] .. " " .. string.sub(v, 20) end
  end
end
local dz, dh = {}, {}
if #dead > 0 then
  for _, k in ipairs(dead) do
    local id = ids[k]
    dz[#dz + 1] = now
    dz[#dz + 1] = id
    dh[#dh + 1] = id
    dh[#dh + 1] = bodies[k] or ""
    dh[#dh + 1] = id .. ":err"
    dh[#dh + 1] = arg[k]
    dh[#dh + 1] = id .. ":n"
    dh[#dh + 1] = string.format("%d", score_count(token_number(tokens[k])))
    if logs[k] then
      dh[#dh + 1] = id .. ":a"
      dh[#dh + 1] = logs[k]
    end
    if prio ~= "0" then
      dh[#dh + 1] = id .. ":p"
      dh[#dh + 1] = prio
    end
    if keyof[id] then
      dh[#dh + 1] = id .. ":k"
      dh[#dh + 1] = keyof[id]
    end
  end
end
-- the ZREM first: it cannot grow memory, so what follows runs at maxmemory too
if #gone > 0 then
  many("ZREM", KEYS[1], gone)
  many("HDEL", KEYS[2], fields, 3000)
elseif #z > 0 then
  allow_writes(KEYS[1])
end
local freed = #gone > 0 and attrs[3] == "1" and release_unique(KEYS[6], gone)
if #dead > 0 then
  -- a dead letter keeps the unique key its job held: requeued, it takes the
  -- key again when no other job holds it (dead_requeue.lua)
  if freed then
    for _, k in ipairs(dead) do
      local u = freed[ids[k]]
      if u then
        dh[#dh + 1] = ids[k] .. ":u"
        dh[#dh + 1] = u
      end
    end
  end
  many("ZADD", KEYS[3], dz)
  many("HSET", KEYS[4], dh, 3000)
  -- retention: the letters past their age, then the oldest beyond the count
  local budget = #dead + 1000
  local old = {}
  if max_age > 0 then
    old = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", string.format("(%.0f", now - max_age), "LIMIT", 0, budget)
    budget = budget - #old
  end
  if keep > 0 and budget > 0 then
    local over = redis.call("ZCARD", KEYS[3]) - #old - keep
    if over > 0 then
      local oldest = redis.call("ZRANGE", KEYS[3], #old, #old + math.min(over, budget) - 1)
      for _, id in ipairs(oldest) do old[#old + 1] = id end
    end
  end
  if #old > 0 then
    local f = {}
    for _, id in ipairs(old) do
      f[#f + 1] = id; f[#f + 1] = id .. ":err"; f[#f + 1] = id .. ":n"; f[#f + 1] = id .. ":p"
      f[#f + 1] = id .. ":a"; f[#f + 1] = id .. ":k"; f[#f + 1] = id .. ":u"
    end
    many("ZREM", KEYS[3], old)
    many("HDEL", KEYS[4], f)
  end
end
if #finished > 0 then
  -- each entry built in one concatenation (see Entry in history.rs)
  local lh, hh = {}, {}
  local at = string.format("%.0f", now)
  -- numbers as text, each converted once: concatenating a number formats it
  -- as a double, which costs more than the rest of the entry
  local text = {}
  local function digits(v)
    local t = text[v]
    if not t then t = format("%d", v); text[v] = t end
    return t
  end
  local ok_head, dead_head = "h1 succeeded " .. at .. " ", "h1 dead " .. at .. " "
  local dead_at = "~" .. at .. " "
  -- the length of hh (lh has half as many)
  local nh = 0
  if #dead == 0 and #logged == 0 and nres == 0 and h_args ~= 0 and next(keyof) == nil then
    -- acks alone, each entry its header, its record and its body: built
    -- from pieces shared by the acks of one token (a fetch's share theirs)
    -- "<how> <ms> <deliveries> <body bytes>\n\n\n<record>\n<body>"
    local heads, opens = {}, {}
    local tail = ',"outcome":"ok"' .. ARGV[8] .. "}\n"
    -- (the settle's jobs share their priority: a word in the header past 0)
    local ph = prio ~= "0" and " p" .. prio or ""
    for j = 1, nfin do
      local k = finished[j]
      local id, tok, body = ids[k], tokens[k], bodies[k] or ""
      local head = heads[tok]
      if not head then
        local n = digits(score_count(token_number(tok)))
        head = ok_head .. n .. " "
        heads[tok] = head
        opens[tok] = ph .. '\n\n\n{"n":' .. n
      end
      local len = #body
      nh = nh + 2
      lh[j] = id
      hh[nh - 1] = id
      hh[nh] = head .. (text[len] or digits(len)) .. opens[tok] .. (spans[k] or "") .. tail .. body
    end
  else
    local ph = prio ~= "0" and " p" .. prio or ""
    for j = 1, nfin do
      local k = finished[j]
      local id, body = ids[k], bodies[k] or ""
      -- the type line stays empty while the body is kept (a reader takes the
      -- type from it; trim_history fills the line when the body goes)
      local typ = ""
      if h_args == 0 then
        typ = body_type(body)
        body = ""
      end
      local n = digits(score_count(token_number(tokens[k])))
      -- "<how> <ms> <deliveries> <body bytes>[ p<priority>][ k<key bytes>][ r<result bytes>]\n
      -- <type>\n<by>\n[<key>\n][<result>\n]", then the records
      local head = kind[k] == "a" and ok_head or dead_head
      local kv, kh, kl = keyof[id], "", ""
      if kv then kh, kl = " k" .. #kv, kv .. "\n" end
      -- an ack's result follows its key
      local rv = kind[k] == "a" and results[id]
      if rv then kh, kl = kh .. " r" .. #rv, kl .. rv .. "\n" end
      local bytes = digits(#body) .. ph
      nh = nh + 2
      -- a dead job may be requeued under its id and entered again: it is
      -- listed as "~<ms> <id>" (see history_ms in lib.lua)
      lh[j] = kind[k] == "a" and id or dead_at .. id
      hh[nh - 1] = id
      if logs[k] then
        hh[nh] = head .. n .. " " .. bytes .. kh .. "\n" .. typ .. "\n\n" .. kl .. logs[k] .. "\n" .. body
      else
        hh[nh] = head .. n .. " " .. bytes .. kh .. "\n" .. typ .. "\n\n" .. kl .. '{"n":' .. n
          .. (spans[k] or "") .. ',"outcome":"ok"' .. ARGV[8] .. "}\n" .. body
      end
    end
  end
  -- a dead letter requeued and finished again leaves its earlier element
  -- behind (once the queue has requeued any: see dead_requeue.lua)
  if attrs[17] then history_overwrites(9, lh) end
  many("RPUSH", KEYS[8], lh)
  many("HSET", KEYS[9], hh, 3000)
  -- by age at most once a second (the queue's hash field "redjob:htrim" says
  -- when next): reads never show what is past its age meanwhile
  local timed = now >= (tonumber(attrs[9]) or 0)
  trim_history(8, 9, now, #finished + 1000, h_keep, h_age, h_args, timed)
  if timed then redis.call("HSET", KEYS[2], "redjob:htrim", string.format("%.0f", now + 1000)) end
end
if #z > 0 then many("ZADD", KEYS[1], z) end
-- concurrency keys (keyed jobs run at priority 0)
local promoted = 0
if attrs[13] and prio == "0" and (#gone > 0 or #z > 0) then
  local K = concurrency_keys(10, 11, 1, now, 12)
  -- the keys' entries as read above (K reads their holders' scores itself)
  K.known = known
  K.mark = attrs[18]
  if #gone > 0 then promoted = select(2, K.gone(gone, nil, kat)) end
  if #z > 0 then
    local kf = {}
    for j = 2, #z, 2 do kf[#kf + 1] = z[j] .. ":k" end
    local at = many("HMGET", KEYS[2], kf)
    -- the call's throttled jobs keep their places
    local spare = {}
    for id in pairs(key_throttles) do spare[id] = true end
    for j, v in ipairs(at) do
      local id = z[2 * j]
      if v and key_throttles[id] then
        -- the key waits until then; the job keeps its place
        K.throttle(string.sub(v, 20), key_throttles[id], spare)
        key_throttles[id] = nil
      elseif v then
        promoted = promoted + K.yield(string.sub(v, 20), z[2 * j - 1], id)
      end
    end
  end
  K.save()
end
-- callers awaiting the jobs that finished learn it
notify_awaited(13, gone, ARGV[7], attrs[14])
-- a key's throttle of a job without a key holds its queue
for _, t in pairs(key_throttles) do throttle_until = math.max(throttle_until, t) end
lease_counts().changes(7, ends, now)
-- a throttle holds the queue (hash field "redjob:throttled", until when, ms:
-- fetch.lua leases nothing before), apart from a pause; "redjob:throttles"
-- says that a job may have records at delivery 1 (see earlier above): a
-- throttle or a recorded release gave a count back with its record kept
if throttle_until > 0 or any_key_throttle or (uncounted_recs and not throttles_seen) then
  local t = {}
  if throttle_until > 0 and throttle_until > throttle_end(attrs[12], 0) then
    t[#t + 1] = "redjob:throttled"
    t[#t + 1] = string.format("%.0f", throttle_until)
  end
  if not throttles_seen then
    t[#t + 1] = "redjob:throttles"
    t[#t + 1] = "1"
  end
  if #t > 0 then redis.call("HSET", KEYS[2], unpack(t)) end
end
-- a fetch held back by the queue's global concurrency (hash field
-- "redjob:held", see fetch.lua) waits for a place: a settle frees some, so it
-- wakes the queue's workers, as a release wakes a waiting one
local freed = next(ends) ~= nil and attrs[10] == "1"
if freed then redis.call("HSET", KEYS[2], "redjob:held", "0") end
if ((released > 0 or promoted > 0) and attrs[5] == "1") or freed then
  if attrs[5] == "1" then redis.call("HSET", KEYS[2], "redjob:waiting", "0") end
  redis.call("PUBLISH", ARGV[7], redis.call("ZCARD", KEYS[1]))
end
if released > 0 then
  lfields[#lfields + 1] = "redjob:released"
  lfields[#lfields + 1] = string.format("%.0f", (tonumber(attrs[6]) or 0) + released)
  many("HSET", KEYS[2], lfields, 3000)
end
if #errfields > 0 then
  if not attrs[4] then
    errfields[#errfields + 1] = "redjob:errors"
    errfields[#errfields + 1] = "1"
  end
  many("HSET", KEYS[2], errfields, 3000)
end
-- the run times of the entries that passed the fence, by type and bucket
-- (counted by the caller; an entry that failed the fence is taken off)
local ncodes = tonumber(ARGV[codes]) or 0
if ntypes > 0 and ncodes > 0 then
  local runs = {}
  for j = 1, ncodes do
    local code = tonumber(ARGV[codes + 2 * j - 1])
    if code then runs[code] = (runs[code] or 0) + (tonumber(ARGV[codes + 2 * j]) or 0) end
  end
  if npassed < nids then
    local k = 0
    for c in string.gmatch(ARGV[codes + 2 * ncodes + 1] or "", "%S+") do
      k = k + 1
      if k > nids then break end
      local code = not passed[k] and tonumber(c)
      if code and runs[code] then runs[code] = runs[code] - 1 end
    end
  end
  for code, n in pairs(runs) do
    local t = ARGV[10 + floor(code / 32)]
    if t and n > 0 then redis.call("HINCRBY", KEYS[5], "rt:" .. (code % 32) .. ":" .. t, n) end
  end
end
-- the counters and this minute's entry in the ring: one read, one write
local failed = retried + #dead
if acked + failed > 0 then
  local m = math.floor(now / 60000)
  local h = math.floor(now / 3600000)
  local slot, hslot = "m" .. (m % 61), "h" .. (h % 169)
  local c = redis.call("HMGET", KEYS[5], "processed", "retried", "dead", "failed", slot, hslot)
  -- a ring entry with this call's runs added, or a new one for a new period
  -- (then also false)
  local function entry(v, at)
    local p, f = acked, failed
    if v then
      local wm, wp, wf = string.match(v, "^(%d+) (%d+) (%d+)$")
      if tonumber(wm) == at then
        return string.format("%.0f %.0f %.0f", at, p + tonumber(wp), f + tonumber(wf)), true
      end
    end
    return string.format("%.0f %.0f %.0f", at, p, f), false
  end
  local function add(i, n) return (tonumber(c[i]) or 0) + n end
  local hour, same_hour = entry(c[6], h)
  local set = {"processed", add(1, acked), "retried", add(2, retried), "dead", add(3, #dead), "failed",
    add(4, failed), slot, entry(c[5], m), hslot, hour}
  -- a hash that grew past 128 fields is made a hash table (see KEYS[5])
  if not same_hour and redis.call("HLEN", KEYS[5]) > 128 then
    set[13] = "redjob:table"
    set[14] = "a value longer than hash-max-listpack-value on purpose: Redis keeps this hash as a hash table"
  end
  redis.call("HSET", KEYS[5], unpack(set))
end
local reply = {acked, retried + released + counted, #dead}
-- gone: no longer in the queue at all; one that moved to another priority
-- (a unique send's replace) failed the fence as a later delivery does
for _, id in ipairs(missing) do
  if redis.call("HEXISTS", KEYS[2], id) == 0 then reply[#reply + 1] = id end
end
-- the finished jobs of batches wait in KEYS[14] for their batches to count
-- them: one member per batch, "<batch id> <index>a,<index>d<id>,..." as the
-- caller built it when every ack and dead letter passed the fence, else
-- only those that passed
local zb, ts, kept_results = {}, string.format("%.0f", now), {}
if #bgroups > 0 then
  local all = acked + #dead == na + nd
  for _, g in ipairs(bgroups) do
    local parts = g[2]
    local with_results = string.find(parts, "r", 1, true)
    if not all or with_results then
      local kept = {}
      local pos = string.gmatch(g[3], "%d+")
      for part in string.gmatch(g[2], "[^,]+") do
        local k = tonumber(pos())
        if passed[k] then
          kept[#kept + 1] = part
          -- a result waits in KEYS[15] until its batch holds it
          local idx = string.match(part, "^(%d+)r$")
          if idx and results[ids[k]] then
            kept_results[#kept_results + 1] = g[1] .. " " .. idx
            kept_results[#kept_results + 1] = results[ids[k]]
          end
        end
      end
      parts = table.concat(kept, ",")
    end
    if parts ~= "" then
      local m = g[1] .. " " .. parts
      zb[#zb + 1] = ts
      zb[#zb + 1] = m
      reply[#reply + 1] = m
    end
  end
end
-- the jobs some flows wait for (registered by dep.lua): their finishes too
if attrs[16] and KEYS[16] and #gone > 0 then
  local fin, at = {}, {}
  for k in ipairs(ids) do
    if passed[k] and (kind[k] == "a" or kind[k] == "d") then
      fin[#fin + 1] = ids[k]
      at[#fin] = k
    end
  end
  local regs = #fin > 0 and take_waiting(16, fin) or {}
  for j, v in ipairs(regs) do
    if v then
      local k, id = at[j], fin[j]
      for b, idx in string.gmatch(v, "(%w+) (%d+)") do
        local part = idx .. "d" .. id
        if kind[k] == "a" and results[id] then
          part = idx .. "r"
          kept_results[#kept_results + 1] = b .. " " .. idx
          kept_results[#kept_results + 1] = results[id]
        elseif kind[k] == "a" then
          part = idx .. "a"
        end
        zb[#zb + 1] = ts
        zb[#zb + 1] = b .. " " .. part
        reply[#reply + 1] = b .. " " .. part
      end
    end
  end
end
if #zb > 0 then
  many("ZADD", KEYS[14], zb)
  if #kept_results > 0 then many("HSET", KEYS[15], kept_results, 3000) end
  if not attrs[15] then redis.call("HSET", KEYS[2], "redjob:bout", ts) end
end
return reply
