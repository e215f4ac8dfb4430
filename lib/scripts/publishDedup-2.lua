--[[
  Appends an event unless the same event id was appended to this partition
  within the dedup window; then returns the first append's offset instead.

  KEYS[1] dedup mark key of the event id
  KEYS[2] partition stream key

  ARGV[1] dedup window (ms)
  ARGV[2..] XADD field/value pairs

  Returns { offset, duplicate } where duplicate is 1 when nothing was appended.
]]
local rcall = redis.call
local first = rcall("GET", KEYS[1])
if first then
  return { first, 1 }
end
local offset = rcall("XADD", KEYS[2], "*", unpack(ARGV, 2))
rcall("SET", KEYS[1], offset, "PX", ARGV[1])
return { offset, 0 }
