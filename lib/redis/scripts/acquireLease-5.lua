--[[
  Takes the lease of a (group, partition) when it is free, expired, or held by
  an earlier incarnation of this same worker, with a fresh epoch, and returns
  the committed offset, initialising it the first time the group reads the
  partition.

  Also tells whether the previous holder released the lease cleanly: if not
  (it crashed, froze or lost Redis), the new owner recovers carefully and
  counts deliveries (see markDelivery-1.lua).

  KEYS[1] lease key
  KEYS[2] epoch counter key
  KEYS[3] committed offset key
  KEYS[4] partition stream key
  KEYS[5] recovery hash (released, at, deliveries, generation)

  ARGV[1] worker id
  ARGV[2] lease TTL (ms)
  ARGV[3] initial offset mode: "start" | "end" | "id"
  ARGV[4] initial offset id (mode "id": the id to record)
  ARGV[5] the group's generation as the worker's last heartbeat saw it
          (heartbeat-4.lua); "0" or absent for a group never deleted

  The partition's keys are stamped with the generation that took them (the
  recovery hash's "generation" field). Keys stamped older belong to a group
  that was deleted after they were written (dropGroup-6.lua) whose partition
  drop (dropGroupPartition-4.lua) has not reached this partition yet (or never
  will, if the admin died in between): the offset and recovery state are
  cleared here, and the partition starts as a new group's would; the reply
  then says so (recovering 2), and the caller clears the done-marks before it reads (they
  are not among these KEYS). The epoch counter stays, so a token of the
  dropped group never matches again.

  The committed offset's lag position (see stream-position.lua) is set here
  when the stream alone tells it and none is stored for this offset: a new
  group starting at the start or the end, a group caught up, one behind a
  trim. A group written by an older eventrail gets its position this way, or
  from its next commit that reaches the end of the log.

  A worker barred from the partition (barMembers-2.lua: a field
  "barred:<workerId>" of the recovery hash, holding until a time on the Redis
  clock) is refused, as when another worker holds the lease: live members of
  its group want events it has no handler for.

  Returns { token, committedOffset, recovering } when taken (recovering is 1
  when the previous holder did not release the lease, 2 when a dropped
  generation's keys were cleared, else 0), nil when another worker holds it.
]]
local rcall = redis.call
--@include stream-position
local current = rcall("GET", KEYS[1])
if current and string.sub(current, 1, #ARGV[1] + 1) ~= ARGV[1] .. ":" then
  return nil
end

local barredUntil = tonumber(rcall("HGET", KEYS[5], "barred:" .. ARGV[1]) or "0")
if barredUntil > 0 then
  local time = rcall("TIME")
  if barredUntil > tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) then
    return nil
  end
end

local generation = tonumber(ARGV[5] or "0")
local stamped = tonumber(rcall("HGET", KEYS[5], "generation") or "0")
local dropped = stamped < generation
if dropped then
  rcall("DEL", KEYS[3], KEYS[5])
end

local previous = rcall("GET", KEYS[2])
local token = ARGV[1] .. ":" .. rcall("INCR", KEYS[2])
rcall("SET", KEYS[1], token, "PX", ARGV[2])

local offset = rcall("GET", KEYS[3])
if not offset then
  if ARGV[3] == "end" then
    local last = rcall("XREVRANGE", KEYS[4], "+", "-", "COUNT", 1)
    if last[1] then offset = last[1][1] else offset = "0-0" end
  elseif ARGV[3] == "id" then
    offset = ARGV[4]
  else
    offset = "0-0"
  end
  rcall("SET", KEYS[3], offset)
end

if not storedPosition(KEYS[5], offset) then
  local position, anchor = plainPosition(streamFacts(KEYS[4]), offset)
  if position then storePosition(KEYS[5], offset, position, anchor) end
end

-- After a drop, nothing of the last holder's work is kept: nothing to recover.
local recovering = 0
if previous and not dropped and rcall("HGET", KEYS[5], "released") ~= previous then
  recovering = 1
end
if dropped then
  rcall("HSET", KEYS[5], "generation", generation)
  recovering = 2
end
return { token, offset, recovering }
