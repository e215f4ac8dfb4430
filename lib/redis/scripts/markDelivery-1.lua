--[[
  Counts one more delivery of an entry by a worker recovering a partition
  whose previous owner died. Only the recovery path calls it, right before
  handling each entry, so an entry that keeps killing workers is counted, and
  entries never started (a quiet partition, one waiting its turn) are not.

  KEYS[1] recovery hash of the (group, partition)

  ARGV[1] stream id of the entry about to be handled

  Returns how many recovering workers have now started this entry.
]]
local rcall = redis.call
if rcall("HGET", KEYS[1], "at") == ARGV[1] then
  return rcall("HINCRBY", KEYS[1], "deliveries", 1)
end
rcall("HSET", KEYS[1], "at", ARGV[1], "deliveries", 1)
return 1
