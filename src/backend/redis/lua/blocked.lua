-- Lists a queue's blocked jobs (waiting for a place of their concurrency keys,
-- see concurrency_keys in lib.lua) a page at a time, by key, then due time:
-- the keyed set's order, read from the cursor's member on by ZRANGE BYLEX
-- (O(log N) plus the page: never the members before it).
-- KEYS[1]  the queue's hash (ns:q:Q)
-- KEYS[2]  the queue's keyed set (ns:q:keyed)
-- KEYS[3]  the queue's concurrency keys (ns:q:keys): the listed keys' per key
-- ARGV[1]  the most rows
-- ARGV[2]  the member the page starts after (the previous page's last), or ""
--          for the first page
-- Returns {-1} when the queue does not exist, else {now ms, then per member
--         read: key, per key, score ("<ms>.<count>"), id, body (false when it
--         has none), receive count ("<id>:rc"), error}
local attrs = redis.call("HMGET", KEYS[1], "vt")
if not attrs[1] then return {-1} end
local now = clock()
local out = {now}
local n = tonumber(ARGV[1]) or 0
if n <= 0 then return out end
local from = ARGV[2] == "" and "-" or "(" .. ARGV[2]
local members = redis.call("ZRANGE", KEYS[2], from, "+", "BYLEX", "LIMIT", 0, n)
if #members == 0 then return out end
local rows, keys, per, fields = {}, {}, {}, {}
for _, m in ipairs(members) do
  local z = string.find(m, "\0", 1, true) or #m + 1
  local key, d, id = string.sub(m, 1, z - 1), string.sub(m, z + 1, z + 19), string.sub(m, z + 20)
  rows[#rows + 1] = {key, string.format("%.0f.%s", tonumber(string.sub(d, 1, 16)) or 0, string.sub(d, 17, 19)), id}
  if not per[key] then
    per[key] = "1"
    keys[#keys + 1] = key
  end
  fields[#fields + 1] = id
  fields[#fields + 1] = id .. ":rc"
  fields[#fields + 1] = id .. ":err"
end
local v = many("HMGET", KEYS[3], keys)
for j, key in ipairs(keys) do per[key] = v[j] and string.match(v[j], "^%d+") or "1" end
local vals = many("HMGET", KEYS[1], fields, 3000)
for i, r in ipairs(rows) do
  out[#out + 1] = r[1]
  out[#out + 1] = per[r[1]]
  out[#out + 1] = r[2]
  out[#out + 1] = r[3]
  out[#out + 1] = vals[3 * i - 2]
  out[#out + 1] = vals[3 * i - 1]
  out[#out + 1] = vals[3 * i]
end
return out
