--[[
  After retention trimmed a partition, moves a live group's lag position
  anchor (see stream-position.lua) up to the new first entry, so readers keep
  trusting the position. Sound because retention trims only entries that
  every live group has committed, hence read: the count behind the position
  is unchanged by such a trim. The offset and the position themselves are not
  touched (only the lease holder writes those, with the offset); a record
  that changed meanwhile is judged as it is now.

  KEYS[1] partition stream
  KEYS[2] recovery hash of the (group, partition) (its "position" field)

  ARGV[1] the first entry of the stream before the trim

  Returns 1 when the anchor moved, 0 when it had no need or no right to: no
  position, an anchor already at or before the first entry, a trim before
  this one that had already passed the anchor (ARGV[1] after it), or an
  entry deleted from the anchor on.
]]
local rcall = redis.call
--@include stream-position

local stored = rcall("HGET", KEYS[2], "position")
if not stored then return 0 end
local offset, position, anchor = string.match(stored, "^(.-)@(%d+)@(.+)$")
if not anchor then return 0 end
local facts = streamFacts(KEYS[1])
if not facts or not facts.added or facts.length == 0 then return 0 end
if idCompare(facts.first, anchor) <= 0 or idCompare(ARGV[1], anchor) > 0 then return 0 end
if idCompare(facts.maxDeleted, anchor) >= 0 then return 0 end
storePosition(KEYS[2], offset, tonumber(position), facts.first)
return 1
