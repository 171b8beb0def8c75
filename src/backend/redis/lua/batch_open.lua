-- Opens a batch (see batches.rs): its hash, with its counts at 0, its
-- callbacks and its description (and a flow's "parent", "<queue> <id>"). Its id enters the index of batches apart
-- (ns:@batches, another slot on a Cluster).
-- KEYS[1]  the batch's hash (ns:@batch:<id>)
-- ARGV[1]  its description, or ""
-- ARGV[2]  how many jobs its enqueuer sends: jobs added while it runs take
--          the indexes from there ("next", see batch_add.lua)
-- ARGV[3..]  triples (callback kind "c", "s", "d" (or a flow's "p", "x"),
--          "<queue>\n<body>" (see batch.lua), the priority it is sent at:
--          kept as "cbp:<kind>" unless 0)
-- Returns 0 when the batch exists already, else when it was created (ms),
-- which scores it in the index
if redis.call("EXISTS", KEYS[1]) == 1 then return 0 end
local created = string.format("%.0f", clock())
local f = {"created", created, "total", "0", "succeeded", "0", "dead", "0",
  "cancelled", "0", "sealed", "0", "next", ARGV[2]}
if ARGV[1] ~= "" then
  f[#f + 1] = "desc"
  f[#f + 1] = ARGV[1]
end
for i = 3, #ARGV, 3 do
  f[#f + 1] = "cb:" .. ARGV[i]
  f[#f + 1] = ARGV[i + 1]
  if ARGV[i + 2] ~= "0" then
    f[#f + 1] = "cbp:" .. ARGV[i]
    f[#f + 1] = ARGV[i + 2]
  end
  local parent = ARGV[i] == "p" and string.match(ARGV[i + 1], "^(%S+ %S+)")
  if parent then
    -- a flow's parent, "<queue> <id>", read apart from its body
    f[#f + 1] = "parent"
    f[#f + 1] = parent
  end
end
many("HSET", KEYS[1], f)
return tonumber(created)
