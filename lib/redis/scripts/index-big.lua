--[[
  Shared by the scripts that append (pasted where a script says
  `--@include index-big`; not a script itself). An entry is big when it
  weighs more than BIG_ENTRY_BYTES as a worker counts it (its field names and
  values, FRAME bytes for the id and each field, and the longest id there is,
  ID_BYTES): every entry that is not big weighs at most BIG_ENTRY_BYTES
  whatever its id. A big entry's id goes into the partition's index of big
  entries, in the call that appends it, so a worker that is behind can read
  plain XRANGE up to the next one and know the read's size beforehand
  (readIndex-3.lua). The sizes here must stay those of big-entries.ts.

  bigEntry(from, to) tells whether the entry of field arguments
  ARGV[from..to] is big (publishDedup-4 weighs its one event here). The run
  scripts (appendMany-n, appendManyDedup-n) are told instead: their caller
  weighs each event by the same rule (big-entries.ts, which the scripts facade
  applies to every run it sends) and names the big ones, and bigOrdinals(list)
  reads that list ('3,17': the run's 3rd and 17th events) into a set, or nil
  for none. indexBig(index, mark, id) records entry `id` in the
  index; where that is refused (an ACL without ZADD, a key of another type),
  it marks the partition as not indexed instead, so workers read it with the
  byte-counting script as before; neither ever fails the append.
]]
local BIG_ENTRY_BYTES = 16384
local FRAME_BYTES = 8
local ID_BYTES = 41
local function bigEntry(from, to)
  local bytes = ID_BYTES + FRAME_BYTES * (to - from + 2)
  for j = from, to do
    bytes = bytes + #ARGV[j]
  end
  return bytes > BIG_ENTRY_BYTES
end
local function bigOrdinals(list)
  if list == nil or list == "" then
    return nil
  end
  local set = {}
  for ordinal in string.gmatch(list, "%d+") do
    set[tonumber(ordinal)] = true
  end
  return set
end
local function indexBig(index, mark, id)
  local added = redis.pcall("ZADD", index, string.match(id, "^%d+"), id)
  if type(added) == "table" and added.err then
    redis.pcall("SET", mark, "none")
  end
end
