-- A batch's counts (see batches.rs). Its hash (KEYS[1]) holds "total",
-- "succeeded", "dead", "cancelled", "sealed" ("1" once its enqueue finished),
-- "created" and "completed" (ms), "desc", its callbacks "cb:<kind>"
-- ("<queue>[ <id>[ c]]\n<body>", kinds "c" on complete, "s" on success, "d"
-- on the first death, and for a flow's group "p", its parent, sent when every
-- child succeeded, and "x", the parent failed when a child dies or is
-- cancelled), "parent" (a flow's, "<queue> <id>", see batch_open.lua),
-- "due:<kind>" while a callback is due and not known to be sent,
-- "why" ("<queue> <id> dead|cancelled": its first job that failed so), and
-- "r<index>", the result of each job that returned one, "next" (the index
-- the next job added while it runs takes, see batch_add.lua) and
-- "cancelled_at" (ms, once cancelled).
-- A job is counted once, however often its finish is applied: bit <index> of
-- KEYS[2] says it was. A finish at an index the batch never gave out (at or
-- past its "next") is not counted: the bitmap stays within its jobs. The
-- batch completes when it is sealed and its finished
-- jobs reach its total: its complete callback falls due, and its success and
-- parent callbacks too when none died or was cancelled; its first dead job
-- makes its death callback due, and its first dead or cancelled job its
-- failed parent's. A callback's priority is "cbp:<kind>" (none: 0, as a
-- batch opened by an earlier release has). A completed batch's keys expire
-- after ARGV[2] ms.
-- KEYS[1]  the batch's hash (ns:@batch:<id>)
-- KEYS[2]  the bitmap of its jobs counted (ns:@batch:<id>:done)
-- KEYS[3]  its first 1,000 dead jobs, "<queue> <id>" (ns:@batch:<id>:dead)
-- KEYS[4]  its jobs added and not known to be sent (ns:@batch:<id>:adds,
--          see batch_add.lua)
-- ARGV[1]  what: "a" apply finishes: ARGV[3] "<index><how>,...", how "a"
--          succeeded, "r" succeeded with a result (ARGV[5..], in order),
--          "c<id>" cancelled or "d<id>" dead, of jobs of queue ARGV[4] (as
--          complete.lua enters them); "s" seal, ARGV[3] jobs sent by its
--          enqueuer (added to those added while it ran); "f" callbacks
--          sent: ARGV[3..] their kinds; "u" ARGV[3] jobs added that could
--          not be sent (the group from index ARGV[4], once) leave its total;
--          "k" cancel (its "why" "batch cancelled" unless a job failed
--          first, a flow's failed parent due); "r" read only; "q" read, with
--          the callbacks due
-- ARGV[2]  how long a completed batch is kept (ms)
-- Returns {} when the batch does not exist; else {total, succeeded, dead,
--         cancelled, sealed, created, completed or "", description or "", why
--         or "", a flow's parent "<queue> <id>" or "", when it was
--         cancelled or "", "1" when this call cancelled it or "", how many
--         finishes "a" did not count for their index was never given out
--         (at or past its "next", or its total for a sealed batch without
--         "next"), then kind, "<queue>...\n<body>", priority of each
--         callback due}
local h = KEYS[1]
if redis.call("EXISTS", h) == 0 then return {} end
local what = ARGV[1]
local changed = ""
local foreign = 0
if what == "a" then
  local add = {a = 0, d = 0, c = 0}
  -- the indexes it gave out end at its "next"; one opened by an older
  -- redjob (no "next") gave out none past its total once sealed, and
  -- before its seal its end is not known: none is refused then
  local lim = redis.call("HMGET", h, "next", "total", "sealed")
  local bound = tonumber(lim[1]) or (lim[3] == "1" and tonumber(lim[2]))
  -- one BITFIELD per 1,000 jobs sets their bits and tells which were unset
  local how, ids, idxs, res, ops, n, nr = {}, {}, {}, {}, {}, 0, 0
  for idx, o, id in string.gmatch(ARGV[3], "(%d+)(%a)([^,]*)") do
    local result
    if o == "r" then
      nr = nr + 1
      result = ARGV[4 + nr]
      o = "a"
    end
    if bound and tonumber(idx) >= bound then
      -- a job naming an index the batch never gave out (a forged or stray
      -- body) is none of its jobs: not counted, no bit set for it
      foreign = foreign + 1
    else
      n = n + 1
      res[n] = result
      how[n] = o
      ids[n] = id
      idxs[n] = idx
      ops[4 * n - 3] = "SET"
      ops[4 * n - 2] = "u1"
      ops[4 * n - 1] = idx
      ops[4 * n] = "1"
    end
  end
  local why
  for i = 1, #ops, 4000 do
    local old = redis.call("BITFIELD", KEYS[2], unpack(ops, i, math.min(i + 3999, #ops)))
    for j, was in ipairs(old) do
      if was == 0 then
        local k = (i - 1) / 4 + j
        add[how[k]] = (add[how[k]] or 0) + 1
        if res[k] then redis.call("HSET", h, "r" .. idxs[k], res[k]) end
        if how[k] == "d" and redis.call("LLEN", KEYS[3]) < 1000 then
          redis.call("RPUSH", KEYS[3], ARGV[4] .. " " .. ids[k])
        end
        if not why and (how[k] == "d" or how[k] == "c") then
          why = ARGV[4] .. " " .. ids[k] .. (how[k] == "d" and " dead" or " cancelled")
        end
      end
    end
  end
  if add.a > 0 then redis.call("HINCRBY", h, "succeeded", add.a) end
  if add.c > 0 then redis.call("HINCRBY", h, "cancelled", add.c) end
  if add.d > 0 and redis.call("HINCRBY", h, "dead", add.d) == add.d
    and redis.call("HEXISTS", h, "cb:d") == 1 then
    redis.call("HSET", h, "due:d", "1")
  end
  if why and redis.call("HSETNX", h, "why", why) == 1 and redis.call("HEXISTS", h, "cb:x") == 1 then
    redis.call("HSET", h, "due:x", "1")
  end
elseif what == "s" then
  -- no HINCRBY: a producer's ACL need not allow it
  local v = redis.call("HMGET", h, "sealed", "total")
  if v[1] ~= "1" then
    redis.call("HSET", h, "total", (tonumber(v[2]) or 0) + tonumber(ARGV[3]), "sealed", "1")
  end
elseif what == "u" then
  if redis.call("HSETNX", h, "u" .. ARGV[4], "1") == 1 then
    redis.call("HINCRBY", h, "total", -tonumber(ARGV[3]))
  end
elseif what == "k" then
  local v = redis.call("HMGET", h, "completed", "cancelled_at")
  if not v[1] and not v[2] then
    redis.call("HSET", h, "cancelled_at", string.format("%.0f", clock()))
    changed = "1"
    -- its first failure, unless a job failed first: a flow's parent is
    -- failed (cancelled) at once
    if redis.call("HSETNX", h, "why", "batch cancelled") == 1 and redis.call("HEXISTS", h, "cb:x") == 1 then
      redis.call("HSET", h, "due:x", "1")
    end
    -- one never sealed (its enqueue failed part way) never completes, nor
    -- may one whose jobs cannot finish (their queue deleted): it goes as a
    -- completed one would, from now (its completion, if it comes, sets
    -- that time again)
    for i = 1, 4 do redis.call("PEXPIRE", KEYS[i], ARGV[2]) end
  end
elseif what == "f" then
  for i = 3, #ARGV do redis.call("HDEL", h, "due:" .. ARGV[i]) end
end
local v = redis.call("HMGET", h, "total", "succeeded", "dead", "cancelled", "sealed", "created", "completed",
  "desc", "why", "cb:c", "cb:s", "parent", "due:c", "due:s", "due:d", "due:p", "due:x", "cancelled_at")
local finished = (tonumber(v[2]) or 0) + (tonumber(v[3]) or 0) + (tonumber(v[4]) or 0)
if what ~= "r" and not v[7] and v[5] == "1" and finished >= (tonumber(v[1]) or 0) then
  v[7] = string.format("%.0f", clock())
  local set = {"completed", v[7]}
  -- a cancelled batch never succeeds, though every job it ran did
  local clean = tonumber(v[3]) == 0 and tonumber(v[4]) == 0 and not v[18]
  for j, due in ipairs({v[10] and "c", clean and v[11] and "s", clean and v[12] and "p"}) do
    if due then
      set[#set + 1] = "due:" .. due; set[#set + 1] = "1"
      v[({13, 14, 16})[j]] = "1"
    end
  end
  many("HSET", h, set)
  for i = 1, 4 do redis.call("PEXPIRE", KEYS[i], ARGV[2]) end
end
-- a cancelled batch goes in its time (see "k"), its counts too
if what == "a" and v[18] and not v[7] then
  for i = 2, 3 do redis.call("PEXPIRE", KEYS[i], ARGV[2]) end
end
local out = {v[1], v[2], v[3], v[4], v[5], v[6], v[7] or "", v[8] or "", v[9] or "", v[12] or "",
  v[18] or "", changed, foreign}
if what ~= "r" then
  for i, kind in ipairs({"c", "s", "d", "p", "x"}) do
    if v[12 + i] then
      local cb = redis.call("HMGET", h, "cb:" .. kind, "cbp:" .. kind)
      out[#out + 1] = kind
      out[#out + 1] = cb[1]
      out[#out + 1] = cb[2] or "0"
    end
  end
end
return out
