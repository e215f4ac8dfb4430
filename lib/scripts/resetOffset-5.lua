--[[
  Sets a group's committed offset in a partition, fencing whoever works it:
  the lease is removed and the epoch bumped, so a running worker's next commit
  or renewal fails and it drops the partition, then takes it again from the
  new offset. Recorded as a clean release, so no crash is counted. The
  group's idempotency marks in the partition go too: a reset asks for the
  entries to be handled again.

  KEYS[1] lease key
  KEYS[2] committed offset key
  KEYS[3] epoch counter key
  KEYS[4] recovery hash
  KEYS[5] idempotency done-marks

  ARGV[1] new committed offset

  Returns the previous committed offset (false when there was none).

  The steps that can fail (INCR and HSET on a key of the wrong type) run
  first, and the offset moves last: a script that errors is not rolled back,
  so a failure leaves the offset and the marks as they were.
]]
local rcall = redis.call
local previous = rcall("GET", KEYS[2])
local epoch = rcall("INCR", KEYS[3])
rcall("HSET", KEYS[4], "released", epoch)
rcall("DEL", KEYS[5])
rcall("DEL", KEYS[1])
rcall("SET", KEYS[2], ARGV[1])
return previous
