--[[
  Shared by the scripts that keep a group's lag position (the loader pastes it
  where a script says `--@include stream-position`; it is not a script itself).

  The position of an offset is a number P such that the group's lag (entries
  after the offset still in the stream) is entries-added - P, where
  entries-added is XINFO STREAM's count of every entry ever appended. Appends
  move both sides by one and trims below the offset move neither, so P stays
  right until an entry after the offset is removed: a trim past the offset
  (the first entry is then after it, and lag is simply the length) or an XDEL
  after it.

  Kept in the recovery hash's "position" field as
  "<offset>@<position>@<anchor>": the anchor is where the position was last
  checked against XINFO STREAM (that offset, or the first entry when the
  offset lay before it). Commits in between add the entries the worker read
  (it reads them consecutively), which is exact as long as no entry from the
  anchor on was ever removed; readers check exactly that (the first entry at
  or before the anchor, max-deleted-entry-id before it), so a commit needs
  XINFO STREAM only now and then. A position stored for
  another offset (an older eventrail moved the offset without it) is never
  taken for this one.

  Stream ids are "<ms>-<seq>" whose parts can exceed a Lua double's exact
  range, so they are compared as digit strings (longer is larger).
]]
local function idCompare(a, b)
  local ams, aseq = string.match(a, "^(%d+)-(%d+)$")
  local bms, bseq = string.match(b, "^(%d+)-(%d+)$")
  if #ams ~= #bms then return #ams < #bms and -1 or 1 end
  if ams ~= bms then return ams < bms and -1 or 1 end
  if #aseq ~= #bseq then return #aseq < #bseq and -1 or 1 end
  if aseq ~= bseq then return aseq < bseq and -1 or 1 end
  return 0
end

-- What XINFO STREAM says (length, entries-added, first and last ids,
-- max-deleted-entry-id), or nil when there is no stream. `added` is nil on
-- Redis before 7.0, which does not count appends.
local function streamFacts(stream)
  if rcall("EXISTS", stream) == 0 then return nil end
  local reply = rcall("XINFO", "STREAM", stream)
  local info = {}
  for i = 1, #reply, 2 do info[reply[i]] = reply[i + 1] end
  local first, last = info["first-entry"], info["last-entry"]
  return {
    length = info["length"],
    added = info["entries-added"],
    maxDeleted = info["max-deleted-entry-id"] or "0-0",
    lastGenerated = info["last-generated-id"],
    first = first and first[1] or nil,
    last = last and last[1] or nil,
  }
end

-- The position of `offset` when the stream alone tells it, and its anchor
-- (nil otherwise): at or after the last entry nothing is behind
-- (entries-added itself), before the first one the whole stream is
-- (entries-added - length; anchored at that first entry, as no entry between
-- the offset and it exists). Ids past the last generated one are left alone:
-- entries appended later may fall before them.
local function plainPosition(facts, offset)
  if not facts then
    if offset == "0-0" then return 0, offset end
    return nil
  end
  if not facts.added then return nil end
  if facts.length == 0 or idCompare(offset, facts.last) >= 0 then
    if idCompare(offset, facts.lastGenerated) <= 0 then return facts.added, offset end
    return nil
  end
  if idCompare(offset, facts.first) < 0 then return facts.added - facts.length, facts.first end
  return nil
end

-- The stored position of `offset` and its anchor, nil when none is stored for exactly it.
local function storedPosition(recovery, offset)
  local stored = rcall("HGET", recovery, "position")
  if not stored then return nil end
  local at, position, anchor = string.match(stored, "^(.-)@(%d+)@(.+)$")
  if at ~= offset then return nil end
  return tonumber(position), anchor
end

-- True when no entry from `anchor` on was ever removed (trimmed or deleted),
-- so a position counted forward from it still holds.
local function intactFrom(facts, anchor)
  return facts.length > 0 and idCompare(facts.first, anchor) <= 0 and idCompare(facts.maxDeleted, anchor) < 0
end

-- Stores the position of `offset` (checked at `anchor`), or forgets it when
-- unknown (readers count then).
local function storePosition(recovery, offset, position, anchor)
  if position then
    rcall("HSET", recovery, "position", offset .. "@" .. string.format("%d", position) .. "@" .. (anchor or offset))
  else
    rcall("HDEL", recovery, "position")
  end
end
