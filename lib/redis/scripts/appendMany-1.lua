--[[
  Appends a run of events to one partition in one call: what `publishMany`
  sends instead of one XADD per event, so a batch costs one command to build,
  send and answer.

  KEYS[1] partition stream key

  ARGV, per event: its number of field arguments, then those arguments
  (field/value pairs, as one XADD takes them).

  Returns { offsets } when every event was appended, in order, or
  { offsets, error } when an XADD failed: the events before it were appended
  (their offsets), it and the ones after it were not. Nothing is appended when
  the arguments are not well formed (an error reply then).
]]
local pcall_redis = redis.pcall
--@include append-run

local events, malformed = runEvents(1)
if not events then
  return redis.error_reply("ERR eventrail appendMany: malformed arguments at position " .. malformed)
end

local offsets = {}
local i = 1
for n = 1, events do
  local count = tonumber(ARGV[i])
  local reply = pcall_redis("XADD", KEYS[1], "*", unpack(ARGV, i + 1, i + count))
  if type(reply) == "table" and reply.err then
    return { offsets, reply.err }
  end
  offsets[n] = reply
  i = i + 1 + count
end
return { offsets }
