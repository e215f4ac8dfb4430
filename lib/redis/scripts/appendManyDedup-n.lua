--[[
  Appends a run of events to one partition in one call, in order. With a
  dedup window (events that carry their own ids), each event is appended
  unless the same event id was appended to this partition within the window
  (then it gives the first append's offset instead), exactly as
  publishDedup-4 does, so an id twice in one run is appended once: what
  `publishMany` sends for consecutive events with producer dedup, instead of
  one publishDedup-4 call per event. Without one (window 0), each event is
  appended, as appendMany-1 does: what a guarded run without ids is sent as.

  The guard keeps what lands in a partition a prefix of what one
  `publishMany` sent to it when that takes several runs. Redis may refuse a
  run (over maxmemory: a command's own arguments count against it) and take
  a smaller one after it to the same stream; so run r of a call's runs in
  the partition goes on only when the guard holds r - 1 (every run before it
  was done), sets it to r when it is done and more runs follow, and deletes
  it after the last run or a failure.

  Big entries are recorded in the partition's index as they are appended;
  the caller names them (ARGV[5], see index-big.lua).
  The caller passes the number of keys.
  KEYS[1] partition stream key
  KEYS[2] the partition's index of big entries
  KEYS[3] the partition's indexed-from mark
  KEYS[3 + n] with a window: dedup mark key of the run's n-th event (none without)
  KEYS[#KEYS] with a guard: the guard key of the call in this partition
  ARGV[1] dedup window (ms), 0 for none
  ARGV[2] guard: how many runs of the call went before this one in the partition, '' for none
  ARGV[3] with a guard: '1' when more runs of the call follow this one in the partition
  ARGV[4] with a guard: its TTL (ms), which bounds how long a call's guard can outlive a lost connection
  ARGV[5] the big events of the run: their ordinals (1 for the first event),
  separated by commas, or '' for none
  ARGV[6..], per event: its number of field arguments, then those arguments
  (field/value pairs, as one XADD takes them).

  Returns { offsets, duplicates } when every event was done, in order
  (duplicates[n] is 1 when nothing was appended for the n-th event), or
  { offsets, duplicates, error } when a command failed: the events before it
  were done (their offsets), it and the ones after it were not, except that
  an event whose XADD went through but whose dedup mark could not be written
  counts as done (it is in the log). When the guard says a run before this
  one was not done, nothing is appended and the error starts with
  "GUARDED". Nothing is written when the arguments are not well formed (an
  error reply then).
]]
local pcall_redis = redis.pcall
--@include append-run
--@include index-big

local window = tonumber(ARGV[1])
if window == nil or window < 0 then
  return redis.error_reply("ERR eventrail appendManyDedup: the dedup window must be 0 or a positive number of ms")
end
local guarded = ARGV[2] ~= nil and ARGV[2] ~= ""
local runsBefore = tonumber(ARGV[2])
local ttl = tonumber(ARGV[4])
if guarded and (runsBefore == nil or runsBefore < 0 or ttl == nil or ttl <= 0 or (ARGV[3] ~= "0" and ARGV[3] ~= "1")) then
  return redis.error_reply("ERR eventrail appendManyDedup: malformed guard arguments")
end
local events, malformed = runEvents(6)
if not events then
  return redis.error_reply("ERR eventrail appendManyDedup: malformed arguments at position " .. malformed)
end
local marks = window > 0 and events or 0
local guardKeys = guarded and 1 or 0
if #KEYS ~= 3 + marks + guardKeys then
  return redis.error_reply("ERR eventrail appendManyDedup: " .. events .. " events, " .. marks .. " dedup keys and " .. guardKeys .. " guard key expected after the stream and its index keys, got " .. #KEYS .. " keys")
end

local guard = KEYS[#KEYS]
if guarded and runsBefore > 0 and redis.call("GET", guard) ~= tostring(runsBefore) then
  return { {}, {}, "GUARDED not appended: a run this call sent to the partition before this one was not" }
end

local function failed(reply)
  return type(reply) == "table" and reply.err
end

local bigs = bigOrdinals(ARGV[5])
local offsets, duplicates = {}, {}
local function stop(reply)
  if guarded then
    redis.call("DEL", guard)
  end
  return { offsets, duplicates, reply.err }
end

local i = 6
for n = 1, events do
  local count = tonumber(ARGV[i])
  local first = false
  local mark = KEYS[n + 3]
  if marks > 0 then
    first = pcall_redis("GET", mark)
    if failed(first) then
      return stop(first)
    end
  end
  if first then
    offsets[n] = first
    duplicates[n] = 1
  else
    local offset = pcall_redis("XADD", KEYS[1], "*", unpack(ARGV, i + 1, i + count))
    if failed(offset) then
      return stop(offset)
    end
    offsets[n] = offset
    duplicates[n] = 0
    if bigs and bigs[n] then
      indexBig(KEYS[2], KEYS[3], offset)
    end
    if marks > 0 then
      local set = pcall_redis("SET", mark, offset, "PX", ARGV[1])
      if failed(set) then
        return stop(set)
      end
    end
  end
  i = i + 1 + count
end
if guarded then
  if ARGV[3] == "1" then
    local set = pcall_redis("SET", guard, runsBefore + 1, "PX", ttl)
    if failed(set) then
      -- Every event of this run is in the log; the runs after it will find no guard and append nothing.
      return { offsets, duplicates, set.err }
    end
  else
    redis.call("DEL", guard)
  end
end
return { offsets, duplicates }
