--[[
  Removes a partition's entries below MINID, never one that should have been
  archived first and was not:

  - with an archive sink (ARGV[3]), every entry below MINID must be archived
    there (its id at most the sink's archive mark): an archive that did not
    complete can never be followed by a trim.
  - without one, once the partition has been archived anywhere (an archive
    mark exists), every entry below MINID must be archived to some sink, unless
    ARGV[4] allows unarchived trims: an instance or a CLI run that lacks the
    fleet's archive settings cannot delete what the archiving instance has not
    saved yet.

  The partition's index of big entries loses the ids of the entries removed
  (those scored below the first entry left).
  KEYS[1] partition stream
  KEYS[2] archive marks hash (sink id -> last archived stream id)
  KEYS[3] the partition's index of big entries

  ARGV[1] MINID: entries with a smaller id are removed
  ARGV[2] "~" for an approximate trim (whole macro nodes only), "=" for exact
  ARGV[3] archive sink id, or "" when this caller archives nothing
  ARGV[4] "1" to trim without an archive even when the partition has archive
          marks; anything else (or absent) refuses

  Returns the number of entries removed; -1 when an entry below MINID is not
  archived to the sink ARGV[3]; -2 when there is no sink, the partition has
  archive marks and an entry below MINID is archived by none of them. Nothing
  is removed on -1 and -2.
]]
local rcall = redis.call
local upTo = "(" .. ARGV[1]

-- Whether no entry lies after `mark` (nil: after the start) and below MINID.
local function covered(mark)
  local from = "-"
  if mark then
    from = "(" .. mark
  end
  return #rcall("XRANGE", KEYS[1], from, upTo, "COUNT", 1) == 0
end

if ARGV[3] ~= "" then
  if not covered(rcall("HGET", KEYS[2], ARGV[3])) then
    return -1
  end
elseif ARGV[4] ~= "1" then
  local marks = rcall("HVALS", KEYS[2])
  if #marks > 0 then
    local archived = false
    for _, mark in ipairs(marks) do
      if covered(mark) then
        archived = true
        break
      end
    end
    if not archived then
      return -2
    end
  end
end
local removed = rcall("XTRIM", KEYS[1], "MINID", ARGV[2], ARGV[1])
if removed > 0 then
  -- An approximate trim leaves whole macro nodes: entries below MINID may stay, and stay indexed.
  local first = rcall("XRANGE", KEYS[1], "-", "+", "COUNT", 1)[1]
  local below = first and first[1] or ARGV[1]
  rcall("ZREMRANGEBYSCORE", KEYS[3], "-inf", "(" .. string.match(below, "^%d+"))
end
return removed
