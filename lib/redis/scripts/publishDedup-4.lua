--[[
  Appends an event unless the same event id was appended to this partition
  within the dedup window; then returns the first append's offset instead.

  A big entry is recorded in the partition's index (see index-big.lua).

  KEYS[1] dedup mark key of the event id
  KEYS[2] partition stream key
  KEYS[3] the partition's index of big entries
  KEYS[4] the partition's indexed-from mark

  ARGV[1] dedup window (ms)
  ARGV[2..] XADD field/value pairs

  Returns { offset, duplicate } where duplicate is 1 when nothing was appended,
  or an error, with nothing written, when there are more field arguments than
  one XADD can take from Lua (unpack hands at most about 8000 values to one
  call; an entry of eventrail's has at most 14).
]]
local rcall = redis.call
local MAX_FIELD_ARGS = 7000
--@include index-big

local count = #ARGV - 1
if count > MAX_FIELD_ARGS or count % 2 ~= 0 then
  return redis.error_reply("ERR eventrail publishDedup: " .. count .. " field arguments; an even number up to " .. MAX_FIELD_ARGS .. " is accepted")
end
local first = rcall("GET", KEYS[1])
if first then
  return { first, 1 }
end
local offset = rcall("XADD", KEYS[2], "*", unpack(ARGV, 2))
if bigEntry(2, #ARGV) then
  indexBig(KEYS[3], KEYS[4], offset)
end
rcall("SET", KEYS[1], offset, "PX", ARGV[1])
return { offset, 0 }
