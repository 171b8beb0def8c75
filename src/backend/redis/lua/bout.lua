-- The batch finishes a queue's settles entered (KEYS[2], see complete.lua).
-- ARGV[1] "d": forgets the finishes ARGV[2..] (their batches counted them)
-- and the results they kept (KEYS[3]);
-- "r": reads up to 200 entered over ARGV[2] ms ago (for batch_recover).
-- Either way the hash field "redjob:bout" then says when the oldest left was
-- entered (none left: deleted), which fetch.lua reports once it is old.
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  the queue's batch finishes (ns:q:bout)
-- KEYS[3]  the queue's batch results (ns:q:bres), "<batch id> <index>" of
--          each "<index>r" finish
-- Returns {"1" when finishes are left, else "0", then the finishes read ("r")}
local out = {"0"}
if ARGV[1] == "d" then
  local m = {}
  for i = 2, #ARGV do m[#m + 1] = ARGV[i] end
  many("ZREM", KEYS[2], m)
  local f = {}
  for _, member in ipairs(m) do
    local b, parts = string.match(member, "^(%S+) (.*)$")
    if parts then
      for part in string.gmatch(parts, "[^,]+") do
        local idx = string.match(part, "^(%d+)r$")
        if idx then f[#f + 1] = b .. " " .. idx end
      end
    end
  end
  if #f > 0 then many("HDEL", KEYS[3], f) end
else
  local old = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", string.format("%.0f", clock() - tonumber(ARGV[2])),
    "LIMIT", 0, 200)
  for _, m in ipairs(old) do out[#out + 1] = m end
end
local first = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
if first[2] then
  out[1] = "1"
  if redis.call("EXISTS", KEYS[1]) == 1 then redis.call("HSET", KEYS[1], "redjob:bout", first[2]) end
else
  redis.call("HDEL", KEYS[1], "redjob:bout")
end
return out
