--[[
  Appends a run of events without ids of their own to one partition in one
  call: what `publishMany` (and a tick of `publish` calls) sends instead of
  one XADD per event, so a run costs one command to build, send and answer.

  With a guard, what lands in a partition stays a prefix of what one
  `publishMany` sent to it when that takes several runs (as appendManyDedup-n
  keeps it): run r of a call's runs in the partition goes on only when the
  guard holds r - 1, sets it to r when it is done and more runs follow, and
  deletes it after the last run or a failure.

  Big entries are recorded in the partition's index as they are appended
  (see index-big.lua). The caller names them (ARGV[2]), by the rule of
  index-big.lua that big-entries.ts mirrors: the script does not weigh each
  event's arguments again (that was a tenth of its time per event).
  The caller passes the number of keys (3, or 4 with a guard).
  KEYS[1] partition stream key
  KEYS[2] the partition's index of big entries
  KEYS[3] the partition's indexed-from mark
  KEYS[4] with a guard: the guard key of the call in this partition

  ARGV[1] the number of field arguments of every event in the run (its
  width), or 0 when they differ
  ARGV[2] the big events of the run: their ordinals (1 for the first event),
  separated by commas, or '' for none
  ARGV[3..5] with a guard: how many runs of the call went before this one in
  the partition, '1' when more follow it, the guard's TTL (ms)
  then the events: with a width, their field arguments back to back, width
  each; with 0, per event its number of field arguments, then those
  arguments (field/value pairs, as one XADD takes them)

  Returns { offsets } when every event was appended, in order, or
  { offsets, error } when an XADD failed: the events before it were appended
  (their offsets), it and the ones after it were not. When the guard says a
  run before this one was not done, nothing is appended and the error starts
  with "GUARDED". Nothing is appended when the arguments are not well formed
  (an error reply then).

  An event costs Redis little more than its XADD: a run of one width is
  checked in one step (no pass over the events), and redis.call's error is
  caught once for the run (Lua's pcall) rather than tested after each event.
]]
local call = redis.call
--@include append-run
--@include index-big

local stream = KEYS[1]
local index, mark = KEYS[2], KEYS[3]
local guard = KEYS[4]
local last = #ARGV
if last == 0 then
  return { {} }
end
local width = tonumber(ARGV[1])
local first = guard and 6 or 3
if width == nil or width < 0 or width % 2 ~= 0 or width > MAX_FIELD_ARGS or (width > 0 and (last - first + 1) % width ~= 0) then
  return redis.error_reply("ERR eventrail appendMany: malformed arguments at position 1")
end
local runsBefore, more, ttl
if guard then
  runsBefore, more, ttl = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
  if runsBefore == nil or runsBefore < 0 or ttl == nil or ttl <= 0 or (more ~= "0" and more ~= "1") then
    return redis.error_reply("ERR eventrail appendMany: malformed guard arguments")
  end
end
local events = width > 0 and (last - first + 1) / width or 0
if width == 0 then
  local malformed
  events, malformed = runEvents(first)
  if not events then
    return redis.error_reply("ERR eventrail appendMany: malformed arguments at position " .. malformed)
  end
end
if guard and runsBefore > 0 and call("GET", guard) ~= tostring(runsBefore) then
  return { {}, "GUARDED not appended: a run this call sent to the partition before this one was not" }
end

local bigs = bigOrdinals(ARGV[2])
local offsets = {}
local n = 0
local function appendAll()
  if width > 0 then
    for i = first, last, width do
      local id = call("XADD", stream, "*", unpack(ARGV, i, i + width - 1))
      n = n + 1
      offsets[n] = id
      if bigs and bigs[n] then
        indexBig(index, mark, id)
      end
    end
  else
    local i = first
    for _ = 1, events do
      local count = tonumber(ARGV[i])
      local id = call("XADD", stream, "*", unpack(ARGV, i + 1, i + count))
      n = n + 1
      offsets[n] = id
      if bigs and bigs[n] then
        indexBig(index, mark, id)
      end
      i = i + 1 + count
    end
  end
end

local ok, failure = pcall(appendAll)
if not ok then
  if guard then
    call("DEL", guard)
  end
  return { offsets, type(failure) == "table" and failure.err or tostring(failure) }
end
if guard then
  if more == "1" then
    local set = redis.pcall("SET", guard, runsBefore + 1, "PX", ttl)
    if type(set) == "table" and set.err then
      -- Every event of this run is in the log; the runs after it will find no guard and append nothing.
      return { offsets, set.err }
    end
  else
    call("DEL", guard)
  end
end
return { offsets }
