--[[
  Sets a group's committed offset in a partition, fencing whoever works it:
  the lease is revoked (see revokeLease) and the epoch bumped, so a running
  worker's next commit or renewal fails and it drops the partition, then
  takes it again from the new offset. Recorded as a clean release, so no crash is counted. The
  group's idempotency marks in the partition go too: a reset asks for the
  entries to be handled again. So do its parked lines (and their floor): the
  entries they held are handled again from the new offset, like the rest. The new offset's lag position (see
  stream-position.lua) is set when the stream tells it (the start, the end,
  before the first entry), or from the caller's count, else forgotten.

  KEYS[1] lease key
  KEYS[2] committed offset key
  KEYS[3] epoch counter key
  KEYS[4] recovery hash
  KEYS[5] idempotency done-marks
  KEYS[6] partition stream

  ARGV[1] new committed offset
  ARGV[2] (optional) an id the caller counted up to: the last entry when it
          began counting
  ARGV[3] (optional) how many entries the caller counted after ARGV[1] up to
          ARGV[2], both ends as stated
  ARGV[4] (optional) entries-added when ARGV[2] was the last entry

  Returns the previous committed offset (false when there was none).

  The steps that can fail (INCR and HSET on a key of the wrong type) run
  first, and the offset moves last: a script that errors is not rolled back,
  so a failure leaves the offset and the marks as they were.
]]
local rcall = redis.call
--@include stream-position

--@include revoke-lease

-- With a count: entries-added numbers every append, so the entry that was
-- last when the caller began counting keeps that number; the new offset sits
-- `count` below it, as long as nothing after the new offset was removed since
-- (no trim past it, no XDEL after it).
local function countedPosition(facts)
  local upTo, count, added = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  if not upTo or not count or not added or not facts or not facts.added or facts.length == 0 then return nil end
  if not intactFrom(facts, ARGV[1]) then return nil end
  local position = added - count
  if facts.added - position < 1 or facts.added - position > facts.length then return nil end
  return position
end

local previous = rcall("GET", KEYS[2])
local epoch = rcall("INCR", KEYS[3])
rcall("HSET", KEYS[4], "released", epoch)
local facts = streamFacts(KEYS[6])
local position, anchor = plainPosition(facts, ARGV[1])
if not position then position, anchor = countedPosition(facts), ARGV[1] end
storePosition(KEYS[4], ARGV[1], position, anchor)
-- Entries handled again get a fresh retry budget (markFailure-1.lua).
rcall("HDEL", KEYS[4], "failingAt", "failingSince", "parkedFloor")
-- HGETALL rather than HKEYS: the documented ACL rules allow it.
local fields = rcall("HGETALL", KEYS[4])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 5) == "park:" then rcall("HDEL", KEYS[4], fields[i]) end
end
rcall("DEL", KEYS[5])
revokeLease(KEYS[1])
rcall("SET", KEYS[2], ARGV[1])
return previous
