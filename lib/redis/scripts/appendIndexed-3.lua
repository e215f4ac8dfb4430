--[[
  Appends one big entry (see index-big.lua) and records it in the
  partition's index of big entries, in one step: what a lone `publish`, a
  redelivery or a replay sends instead of a plain XADD when its entry is big.
  Smaller entries go as plain XADDs.

  KEYS[1] partition stream key
  KEYS[2] the partition's index of big entries
  KEYS[3] the partition's indexed-from mark

  ARGV XADD field/value pairs

  Returns the entry's id, as XADD does, or XADD's error (nothing appended).
]]
--@include index-big
local id = redis.call("XADD", KEYS[1], "*", unpack(ARGV))
indexBig(KEYS[2], KEYS[3], id)
return id
