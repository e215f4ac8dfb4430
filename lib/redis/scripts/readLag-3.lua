--[[
  A group's lag in one partition in O(1): the entries still in the stream
  after its committed offset, from the offset's stored lag position (see
  stream-position.lua) and XINFO STREAM's entries-added. Read only.

  KEYS[1] partition stream
  KEYS[2] committed offset key
  KEYS[3] recovery hash (its "position" field)

  Returns { lag, committedOffset }: lag is -1 when it cannot be told here
  (no position stored for this offset, an entry after its anchor removed, or
  Redis before 7.0), and the caller counts instead; committedOffset is false when
  the group never read the partition (every entry is lag then).
]]
local rcall = redis.call
--@include stream-position

local committed = rcall("GET", KEYS[2])
local offset = committed or "0-0"
local facts = streamFacts(KEYS[1])
if not facts or facts.length == 0 or idCompare(offset, facts.last) >= 0 then return { 0, committed } end
if idCompare(offset, facts.first) < 0 then return { facts.length, committed } end
if not facts.added then return { -1, committed } end
local position, anchor = storedPosition(KEYS[3], offset)
if not position or not intactFrom(facts, anchor) then return { -1, committed } end
local lag = facts.added - position
if lag < 1 or lag > facts.length then return { -1, committed } end
return { lag, committed }
