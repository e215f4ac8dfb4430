--[[
  Deletes what a group keeps in one partition, unless a worker of a newer
  generation already took the partition: the second half of a group delete,
  after dropGroup-6.lua bumped the generation. A worker that joined after that
  bump acquires with the new generation (acquireLease-5.lua stamps it in the
  recovery hash), so its lease and offset are spared; one that acquired with
  an older generation belongs to the dropped group and is fenced here.

  KEYS[1] committed offset key
  KEYS[2] lease key
  KEYS[3] recovery hash (its "generation" field is the stamp)
  KEYS[4] idempotency done-marks

  The lease epoch counter is kept: deleting it would issue lease tokens again
  that a worker of the dropped group may still hold.

  ARGV[1] generation the drop created

  Returns 1 deleted, 0 spared (taken by the new generation).
]]
local rcall = redis.call
if tonumber(rcall("HGET", KEYS[3], "generation") or "0") >= tonumber(ARGV[1]) then
  return 0
end
rcall("DEL", KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
