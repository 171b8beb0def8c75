-- Makes a flow wait for a job that exists already (see batches.rs): job
-- ARGV[1] of this queue becomes job ARGV[3] of batch ARGV[2]. A job still to
-- finish (in the queue at any priority or state, or a flow's parent waiting
-- for its own children, "<id>:w") is registered in KEYS[5]: the settle that
-- finishes it (complete.lua), a cancel (cancel.lua) or its failure as a
-- parent (flow_fail.lua) enters its finish for the batch to count. A job that
-- finished already, in the dead letters or the history (not past its age), has
-- its finish entered at once, as a settle would: the check and the
-- registration are one step, so a finish between them cannot be missed. A
-- job cancelled or deleted counts as cancelled.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  its dead letters' sorted set (ns:q:dead)
-- KEYS[3], KEYS[4]  its history (ns:q:history:ids, not read: an entry says when
--          it finished; ns:q:history:Q)
-- KEYS[5]  its waited-for jobs (ns:q:deps): "<id>" -> how many flows wait,
--          "<id>:<n>" -> "<batch id> <index>" each (see take_waiting in
--          lib.lua; an "<id>" that holds "<batch id> <index>,..." itself was
--          kept so before)
-- KEYS[6]  its batch finishes (ns:q:bout, see complete.lua)
-- KEYS[7]  its batch results (ns:q:bres, see complete.lua)
-- ARGV[1]  the job's id
-- ARGV[2], ARGV[3]  the batch's id, the job's index in it
-- ARGV[4]  the history setting when the queue stores none
-- ARGV[5]  the most flows that may wait for one job (MAX_WAITERS)
-- ARGV[6..]  optional: batches that wait no more (cancelled, or gone): their
--          registrations for the job are dropped first, so that they take no
--          place (the caller reads them when {-2} said the job had no room)
-- Returns {-1} when the queue does not exist; {-2} when as many flows wait
--         for the job already; {0} when no such job is known
--         (never was, or past its history's retention); {1} registered; {2,
--         the finish entered} when it finished already
local attrs = redis.call("HMGET", KEYS[1], "vt", "redjob:history", "redjob:bout")
if not attrs[1] then return {-1} end
local id, b, idx = ARGV[1], ARGV[2], ARGV[3]
local here = redis.call("HMGET", KEYS[1], id, id .. ":w")
if here[1] or here[2] then
  -- one write however many wait: "<id>" counts them, "<id>:<n>" is each
  local v = redis.call("HGET", KEYS[5], id)
  local most = tonumber(ARGV[5]) or 100
  if v and #ARGV > 5 then
    -- at most `most` entries: rewritten in the count form without the stale
    local stale, list = {}, {}
    for i = 6, #ARGV do stale[ARGV[i]] = true end
    if string.find(v, " ", 1, true) then
      for e in string.gmatch(v, "[^,]+") do list[#list + 1] = e end
    else
      local f = {}
      for k = 1, (tonumber(v) or 0) do f[k] = id .. ":" .. k end
      if #f > 0 then
        for _, e in ipairs(redis.call("HMGET", KEYS[5], unpack(f))) do
          if e then list[#list + 1] = e end
        end
        redis.call("HDEL", KEYS[5], unpack(f))
      end
    end
    local kept = {id, 0}
    for _, e in ipairs(list) do
      if not stale[string.match(e, "^(%S+)")] then
        kept[2] = kept[2] + 1
        kept[#kept + 1] = id .. ":" .. kept[2]
        kept[#kept + 1] = e
      end
    end
    redis.call("HSET", KEYS[5], unpack(kept))
    v = tostring(kept[2])
  end
  if v and string.find(v, " ", 1, true) then
    -- registered when "<id>" held the list itself: appended to it as then
    local _, commas = string.gsub(v, ",", "")
    if commas + 1 >= most then return {-2} end
    redis.call("HSET", KEYS[5], id, v .. "," .. b .. " " .. idx)
  else
    if (tonumber(v) or 0) >= most then return {-2} end
    local n = (tonumber(v) or 0) + 1
    redis.call("HSET", KEYS[5], id, n, id .. ":" .. n, b .. " " .. idx)
  end
  redis.call("HSET", KEYS[1], "redjob:deps", "1")
  return {1}
end
local now = clock()
local part
if redis.call("ZSCORE", KEYS[2], id) then
  part = idx .. "d" .. id
else
  local e = redis.call("HGET", KEYS[4], id)
  local at = entry_ms(e)
  local _, _, age = history_setting(attrs[2], ARGV[4])
  if not (at and (age == 0 or at >= now - age)) then return {0} end
  -- "h1 <how> <ms> <deliveries> <body bytes>[ k<key bytes>][ r<result bytes>]\n
  -- <type>\n<by>\n[<key>\n][<result>\n]..." (see history.rs)
  local head = string.match(e, "^[^\n]*")
  local how = string.match(head, "^h1 (%S+)")
  if how == "succeeded" then
    part = idx .. "a"
    local rlen = tonumber(string.match(head, " r(%d+)"))
    if rlen then
      local klen = tonumber(string.match(head, " k(%d+)"))
      local pos = #head + 2
      for _ = 1, 2 do pos = string.find(e, "\n", pos, true) + 1 end
      if klen then pos = pos + klen + 1 end
      redis.call("HSET", KEYS[7], b .. " " .. idx, string.sub(e, pos, pos + rlen - 1))
      part = idx .. "r"
    end
  elseif how == "dead" then
    part = idx .. "d" .. id
  else
    part = idx .. "c" .. id
  end
end
local member = b .. " " .. part
local ts = string.format("%.0f", now)
redis.call("ZADD", KEYS[6], ts, member)
if not attrs[3] then redis.call("HSET", KEYS[1], "redjob:bout", ts) end
return {2, member}
