--[[
  Appends a run of events that carry their own ids to one partition in one
  call, each unless the same event id was appended to this partition within
  the dedup window (then it gives the first append's offset instead): what
  `publishMany` sends for consecutive events with producer dedup, instead of
  one publishDedup-2 call per event. Each event does exactly what
  publishDedup-2 does, in order, so an id twice in one run is appended once.

  The caller passes the number of keys (1 + the run's events).
  KEYS[1] partition stream key
  KEYS[1 + n] dedup mark key of the run's n-th event
  ARGV[1] dedup window (ms)
  ARGV[2..], per event: its number of field arguments, then those arguments
  (field/value pairs, as one XADD takes them).

  Returns { offsets, duplicates } when every event was done, in order
  (duplicates[n] is 1 when nothing was appended for the n-th event), or
  { offsets, duplicates, error } when a command failed: the events before it
  were done (their offsets), it and the ones after it were not, except that
  an event whose XADD went through but whose dedup mark could not be written
  counts as done (it is in the log). Nothing is written when the arguments
  are not well formed (an error reply then).
]]
local pcall_redis = redis.pcall
--@include append-run

local window = tonumber(ARGV[1])
if window == nil or window <= 0 then
  return redis.error_reply("ERR eventrail appendManyDedup: the dedup window must be a positive number of ms")
end
local events, malformed = runEvents(2)
if not events then
  return redis.error_reply("ERR eventrail appendManyDedup: malformed arguments at position " .. malformed)
end
if events ~= #KEYS - 1 then
  return redis.error_reply("ERR eventrail appendManyDedup: " .. events .. " events but " .. (#KEYS - 1) .. " dedup keys")
end

local function failed(reply)
  return type(reply) == "table" and reply.err
end

local offsets, duplicates = {}, {}
local i = 2
for n = 1, events do
  local count = tonumber(ARGV[i])
  local mark = KEYS[n + 1]
  local first = pcall_redis("GET", mark)
  if failed(first) then
    return { offsets, duplicates, first.err }
  end
  if first then
    offsets[n] = first
    duplicates[n] = 1
  else
    local offset = pcall_redis("XADD", KEYS[1], "*", unpack(ARGV, i + 1, i + count))
    if failed(offset) then
      return { offsets, duplicates, offset.err }
    end
    offsets[n] = offset
    duplicates[n] = 0
    local set = pcall_redis("SET", mark, offset, "PX", ARGV[1])
    if failed(set) then
      return { offsets, duplicates, set.err }
    end
  end
  i = i + 1 + count
end
return { offsets, duplicates }
