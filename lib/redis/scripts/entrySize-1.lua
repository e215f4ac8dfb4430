--[[
  The id and size of the entry after an id, without sending the entry: a
  reader whose every read of that one entry is cut by Redis (a client output
  buffer limit below its size) names it with this. The entry is copied into
  Lua's memory once, not into a reply. Read only.

  KEYS[1] partition stream

  ARGV[1] stream id of the last entry read (the entry asked about follows it)

  Returns { id, bytes }: bytes is the length of the id and of every field
  name and value; false when no entry follows ARGV[1].
]]
local rcall = redis.call
local entry = rcall("XRANGE", KEYS[1], "(" .. ARGV[1], "+", "COUNT", 1)[1]
if not entry then
  return false
end
local bytes = #entry[1]
for _, value in ipairs(entry[2]) do
  bytes = bytes + #value
end
return { entry[1], bytes }
