-- Settles a consumer's finished events: acknowledges the handled ones (deleting
-- their attempt records, if the subscriber has any), sets the failed ones' idle
-- time so that a claim takes them again when their backoff is over, and moves
-- the given-up ones to the subscriber's dead letters. Each names the delivery
-- it settles (id, delivery count, the subscriber's epoch then). None applies
-- once a read may have delivered the event anew after a rewind (the epoch
-- changed: XREADGROUP makes it a new delivery with a count of 1, as the first
-- one had); a retry or dead letter applies only while this consumer still
-- holds that delivery (one another consumer claimed meanwhile, its count and
-- consumer changed, is left to it).
-- KEYS[1]  the topic's stream (ns:t:{topic})
-- KEYS[2]  the subscriber's dead letters (ns:t:{topic}:dead:<subscriber>)
-- KEYS[3]  the subscriber's attempt records (ns:t:{topic}:attempts:<subscriber>):
--          a hash of event id to its records so far, one JSON object per line
--          (the last MAX_RECORDS, see attempts.rs)
-- KEYS[4]  the subscriber's epoch (ns:t:{topic}:epoch:<subscriber>, see
--          topic_group.lua; missing is 0)
-- ARGV[1]  the subscriber, ARGV[2] this consumer
-- ARGV[3]  the most dead letters to keep ("" for no limit)
-- ARGV[4]  a, then a arguments: the deliveries to acknowledge in groups, each
--          an epoch, then k > 0 and k ids of first deliveries (count 1), or
--          -k and k pairs of a claimed delivery's id and count
-- then     m, then m 5-tuples: a delivery (id, count, epoch), idle time to
--          set (ms), delivery count to set ("" to keep it: a release of an
--          event that did not run sets it back)
-- then     k, then k 7-tuples: a delivery (id, count, epoch), type, data,
--          error, deliveries (the letter takes the type and data from the
--          stream's entry, the tuple's where it is trimmed)
-- then     who ran them, as JSON members to add to each record
--          (`,"worker":"…","host":"…"`), or ""
-- then     r, then r 5-tuples: id, attempt number, how long before now it
--          started and ended (ms), and the rest of its record from the
--          outcome on, without the closing brace (`,"outcome":"error","error":"…"`):
--          runs that ended in a retry or a dead letter, oldest first. A
--          retry's are added to its records; a dead letter takes its records
--          with it (its field "attempts"). An event's runs that begin with
--          number 1 (a delivery's first run) replace its records: any there
--          are of a delivery a rewind replaced (XREADGROUP made it anew, with
--          a count of 1), or these runs sent again
-- An event to retry or bury that the topic no longer holds (trimmed by its
-- retention while it ran) leaves the pending list as XCLAIM meets it; its
-- records go with it (a claim does the same for one trimmed later).
-- Returns {acknowledged, retries set, dead-lettered}
-- An acknowledgement is applied in the epoch it names, whoever holds the
-- event now: the event was handled (a consumer that claimed it since runs it
-- again, as at-least-once allows, and its outcome finds it gone), and an
-- XPENDING per acknowledged event would cost Redis more than the XACK does.
-- But a claimed delivery's (a count over 1) is not applied once a read
-- delivered the event anew (its count is lower now: a claim may carry an
-- event across a rewind into the new epoch, where a read then delivers it
-- again). Costs one GET, and one XPENDING per claimed acknowledgement, retry
-- and dead letter.
local key, dead, group, me = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local epoch = redis.call("GET", KEYS[4]) or "0"
-- whether the delivery at ARGV[j] (id, count, epoch) is still the one this
-- consumer holds, and the event's pending entry (XPENDING's reply)
local function holds(j)
  local p = redis.pcall("XPENDING", key, group, ARGV[j], ARGV[j], 1)
  local ok = ARGV[j + 2] == epoch and not p.err and p[1] ~= nil and p[1][2] == me
    and tonumber(p[1][4]) == tonumber(ARGV[j + 1])
  return ok, p
end
local keep = tonumber(ARGV[3])
-- the runs' records by event id, in order, and the number of each one's first
local runs, first = {}, {}
do
  local j = 5 + tonumber(ARGV[4])
  j = j + 1 + 5 * tonumber(ARGV[j])
  j = j + 1 + 7 * tonumber(ARGV[j])
  local by = ARGV[j]
  local r = tonumber(ARGV[j + 1])
  local now = r > 0 and clock() or 0
  for x = j + 2, j + 1 + 5 * r, 5 do
    local lines = runs[ARGV[x]] or {}
    if #lines == 0 then first[ARGV[x]] = tonumber(ARGV[x + 1]) end
    lines[#lines + 1] = '{"n":' .. ARGV[x + 1] .. ',"start":' .. string.format("%.0f", now - tonumber(ARGV[x + 2]))
      .. ',"end":' .. string.format("%.0f", now - tonumber(ARGV[x + 3])) .. ARGV[x + 4] .. by .. "}"
    runs[ARGV[x]] = lines
  end
end
-- `log` with run record `rec` added: a record of a number recorded already
-- (a settle sent again after its reply was lost) is not added twice, but
-- takes the place of a `lease_lost` one (a claim took the event from a
-- consumer that still ran it)
local function add_run(log, rec)
  if log then
    local last = string.match(log, "[^\n]*$")
    local had = tonumber(string.match(last, '^{"n":(%d+)') or -1)
    local n = tonumber(string.match(rec, '^{"n":(%d+)'))
    if had >= n then
      if had > n or not string.find(last, '"outcome":"lease_lost"', 1, true) then return log end
      log = #last < #log and string.sub(log, 1, #log - #last - 1) or nil
    end
  end
  return append_attempt(log, rec)
end
-- event `id`'s records with its runs in this call added; those of a new
-- delivery's first run on replace the records of an earlier one (see above)
local function records(id)
  local log = nil
  if first[id] ~= 1 then log = redis.call("HGET", KEYS[3], id) or nil end
  for _, l in ipairs(runs[id] or {}) do log = add_run(log, l) end
  return log
end
local i = 4
local acks = {}
do
  local j, last = i + 1, i + tonumber(ARGV[i])
  while j <= last do
    local mine, k = ARGV[j] == epoch, tonumber(ARGV[j + 1])
    j = j + 2
    if k >= 0 then
      if mine then
        for x = j, j + k - 1 do acks[#acks + 1] = ARGV[x] end
      end
      j = j + k
    else
      if mine then
        for x = j, j - 2 * k - 1, 2 do
          local p = redis.pcall("XPENDING", key, group, ARGV[x], ARGV[x], 1)
          if not p.err and p[1] and tonumber(p[1][4]) >= tonumber(ARGV[x + 1]) then
            acks[#acks + 1] = ARGV[x]
          end
        end
      end
      j = j - 2 * k
    end
  end
  i = last + 1
end
local acked = 0
if #acks > 0 then
  for c = 1, #acks, 4000 do
    acked = acked + redis.call("XACK", key, group, unpack(acks, c, math.min(c + 3999, #acks)))
  end
end
-- whether the topic still holds event `id`
local function held(id)
  return #redis.call("XRANGE", key, id, id) > 0
end
local m = tonumber(ARGV[i])
local retried = 0
for j = i + 1, i + 5 * m, 5 do
  local got
  if holds(j) then
    if ARGV[j + 4] == "" then
      got = redis.call("XCLAIM", key, group, me, 0, ARGV[j], "IDLE", ARGV[j + 3], "JUSTID")
    else
      got = redis.call("XCLAIM", key, group, me, 0, ARGV[j], "IDLE", ARGV[j + 3],
        "RETRYCOUNT", ARGV[j + 4], "JUSTID")
    end
  end
  if got and #got > 0 then
    retried = retried + 1
    if runs[ARGV[j]] then
      redis.call("HSET", KEYS[3], ARGV[j], records(ARGV[j]))
    end
  elseif got or not held(ARGV[j]) then
    -- trimmed while it ran (XCLAIM dropped it just now, or a renewal's
    -- did): no delivery comes again to read its records
    redis.call("HDEL", KEYS[3], ARGV[j])
  end
end
i = i + 5 * m + 1
local k = tonumber(ARGV[i])
local buried = 0
-- Redis at maxmemory (noeviction) refuses a script whose first write may grow
-- memory (see allow_writes in lib.lua), as a dead letter's XADD does: a settle
-- that acknowledged and retried nothing first acknowledges event 0-0 (no
-- event has that id), a write that cannot grow it, so that events are
-- dead-lettered while memory is full (one command, in settles with dead
-- letters only; pcall: a key that is no stream is met as before)
if k > 0 then redis.pcall("XACK", key, group, "0-0") end
for j = i + 1, i + 7 * k, 7 do
  local ok, p = holds(j)
  if ok then
    -- the type and data as the topic holds them, byte for byte (the caller's
    -- are text, empty for bytes another program wrote that are not UTF-8);
    -- the caller's where the entry is trimmed
    local ty, data = ARGV[j + 3], ARGV[j + 4]
    local e = redis.call("XRANGE", key, ARGV[j], ARGV[j])[1]
    if e then
      for f = 1, #e[2], 2 do
        if e[2][f] == "type" then ty = e[2][f + 1] elseif e[2][f] == "data" then data = e[2][f + 1] end
      end
    end
    local fields = {"id", ARGV[j], "type", ty, "data", data, "error", ARGV[j + 5],
      "deliveries", ARGV[j + 6]}
    local log = records(ARGV[j])
    if log then
      fields[#fields + 1] = "attempts"
      fields[#fields + 1] = log
    end
    if keep then
      -- exact, as a queue's dead letters are kept
      redis.call("XADD", dead, "MAXLEN", keep, "*", unpack(fields))
    else
      redis.call("XADD", dead, "*", unpack(fields))
    end
    if log then redis.call("HDEL", KEYS[3], ARGV[j]) end
    redis.call("XACK", key, group, ARGV[j])
    buried = buried + 1
  elseif not p.err and not p[1] and not held(ARGV[j]) then
    -- trimmed while it ran, and a renewal's XCLAIM dropped it: its records
    redis.call("HDEL", KEYS[3], ARGV[j])
  end
end
-- an acknowledged event's records, whatever its delivery count (a rewind
-- delivers an event waiting for its retry again with a count of 1); without
-- records kept, one EXISTS
if #acks > 0 and redis.call("EXISTS", KEYS[3]) == 1 then many("HDEL", KEYS[3], acks) end
return {acked, retried, buried}
