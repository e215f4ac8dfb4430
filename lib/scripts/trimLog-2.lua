--[[
  Removes a partition's entries below MINID. When archiving is on, it first
  checks that every entry below MINID is archived (its id is at most the
  archive mark of the sink) and trims nothing otherwise: an archive that did
  not complete can never be followed by a trim.

  KEYS[1] partition stream
  KEYS[2] archive marks hash (sink id -> last archived stream id)

  ARGV[1] MINID: entries with a smaller id are removed
  ARGV[2] "~" for an approximate trim (whole macro nodes only), "=" for exact
  ARGV[3] archive sink id, or "" when nothing is archived

  Returns the number of entries removed, or -1 when an entry below MINID is
  not archived (nothing removed).
]]
local rcall = redis.call
if ARGV[3] ~= "" then
  local mark = rcall("HGET", KEYS[2], ARGV[3])
  local from = "-"
  if mark then
    from = "(" .. mark
  end
  if #rcall("XRANGE", KEYS[1], from, "(" .. ARGV[1], "COUNT", 1) > 0 then
    return -1
  end
end
return rcall("XTRIM", KEYS[1], "MINID", ARGV[2], ARGV[1])
