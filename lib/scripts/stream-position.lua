--[[
  Shared by the scripts that keep a group's lag position (the loader pastes it
  where a script says `--@include stream-position`; it is not a script itself).

  The position of an offset is a number P such that the group's lag (entries
  after the offset still in the stream) is entries-added - P, where
  entries-added is XINFO STREAM's count of every entry ever appended. Appends
  move both sides by one and trims below the offset move neither, so P stays
  right until an entry after the offset is removed: a trim past the offset
  (the first entry is then after it, and lag is simply the length) or an XDEL
  after it (max-deleted-entry-id is then after it, and the position is not
  trusted). Kept in the recovery hash's "position" field as
  "<offset>@<position>", so a position written for another offset (an older
  eventrail moved the offset without it) is never taken for this one.

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

-- The position of `offset` when the stream alone tells it (nil otherwise):
-- at or after the last entry nothing is behind (entries-added itself), before
-- the first one the whole stream is (entries-added - length). Ids past the
-- last generated one are left alone: entries appended later may fall before
-- them.
local function plainPosition(facts, offset)
  if not facts then
    if offset == "0-0" then return 0 end
    return nil
  end
  if not facts.added then return nil end
  if facts.length == 0 or idCompare(offset, facts.last) >= 0 then
    if idCompare(offset, facts.lastGenerated) <= 0 then return facts.added end
    return nil
  end
  if idCompare(offset, facts.first) < 0 then return facts.added - facts.length end
  return nil
end

-- The stored position of `offset`, nil when none is stored for exactly it.
local function storedPosition(recovery, offset)
  local stored = rcall("HGET", recovery, "position")
  if not stored then return nil end
  local at, position = string.match(stored, "^(.-)@(%d+)$")
  if at ~= offset then return nil end
  return tonumber(position)
end

-- Stores the position of `offset`, or forgets it when unknown (readers count then).
local function storePosition(recovery, offset, position)
  if position then
    rcall("HSET", recovery, "position", offset .. "@" .. string.format("%d", position))
  else
    rcall("HDEL", recovery, "position")
  end
end
