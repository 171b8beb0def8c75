-- Reads a queue's concurrency keys (see concurrency_keys in lib.lua): one key,
-- or a page of them (HSCAN of the keys hash), each in a few commands however
-- many jobs it holds back.
-- KEYS[1]  the queue's sorted set (ns:q)
-- KEYS[2]  the queue's hash (ns:q:Q)
-- KEYS[3]  the queue's keyed set (ns:q:keyed)
-- KEYS[4]  the queue's concurrency keys (ns:q:keys)
-- ARGV[1]  "key": ARGV[2] is the key; "page": ARGV[2] is the HSCAN cursor
--          ("0" for the first page), ARGV[3] about how many keys
-- Returns {-1} when the queue does not exist, else {the next page's cursor
--         ("" when done, or for one key), then per key: key, per key (0: not
--         known), running, holding (a place, not running), blocked, until when
--         a handler throttled it (ms; 0: not throttled)}
if redis.call("EXISTS", KEYS[2]) == 0 then return {-1} end
local now = clock()
local out = {""}
-- the key's jobs waiting for a place: the ranks of its first member and of
-- the first member past its range
local function blocked(key)
  local a = redis.call("ZRANGE", KEYS[3], "[" .. key .. "\0", "(" .. key .. "\1", "BYLEX", "LIMIT", 0, 1)[1]
  if not a then return 0 end
  local b = redis.call("ZRANGE", KEYS[3], "[" .. key .. "\1", "+", "BYLEX", "LIMIT", 0, 1)[1]
  local rb = b and redis.call("ZRANK", KEYS[3], b) or redis.call("ZCARD", KEYS[3])
  return rb - redis.call("ZRANK", KEYS[3], a)
end
local function add(key, v)
  local per, running, holding, held = 0, 0, 0, 0
  if v then
    local ids = {}
    for w in string.gmatch(v, "%S+") do ids[#ids + 1] = w end
    per = tonumber(table.remove(ids, 1)) or 0
    local live = {}
    for _, w in ipairs(ids) do
      local ends = tonumber(string.match(w, "~(%d+)$"))
      local until_ms = tonumber(string.match(w, "^@(%d+)$"))
      if until_ms then
        if until_ms > now then held = until_ms end
      elseif not ends then
        live[#live + 1] = w
      elseif ends >= now then
        running = running + 1
      end
    end
    if #live > 0 then
      for _, s in ipairs(many("ZMSCORE", KEYS[1], live)) do
        if s then
          local n = tonumber(s)
          if select(2, score_count(n)) and math.floor(n) >= now then
            running = running + 1
          else
            holding = holding + 1
          end
        end
      end
    end
  end
  out[#out + 1] = key
  out[#out + 1] = per
  out[#out + 1] = running
  out[#out + 1] = holding
  out[#out + 1] = blocked(key)
  out[#out + 1] = held
end
if ARGV[1] == "key" then
  add(ARGV[2], redis.call("HGET", KEYS[4], ARGV[2]))
  return out
end
local r = redis.call("HSCAN", KEYS[4], ARGV[2], "COUNT", tonumber(ARGV[3]))
out[1] = r[1] == "0" and "" or r[1]
for j = 1, #r[2], 2 do add(r[2][j], r[2][j + 1]) end
return out
