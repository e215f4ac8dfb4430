--[[
  Remembers since when the entry a partition is stuck on has been failing, so
  that a retry budget in time (maxRetryAgeMs) survives a restart or a
  takeover. Called once per failing message, on its first failure in a
  worker (never on the happy path): the first call for an entry stores the
  time given, later calls for the same entry (another worker, after a
  restart) return the stored one. One entry per partition is remembered: the
  last one that started failing. A commit that reaches that entry
  (commitOffset-5.lua) and an offset reset (resetOffset-6.lua) forget it.

  KEYS[1] recovery hash of the (group, partition) (fields failingAt, failingSince)

  ARGV[1] stream id of the failing entry
  ARGV[2] the time of this failure on the Redis clock (the caller's estimate of
          it, see redis-clock.ts), epoch ms

  Returns the epoch ms since which the entry has been failing.
]]
local rcall = redis.call
if rcall("HGET", KEYS[1], "failingAt") == ARGV[1] then
  local since = tonumber(rcall("HGET", KEYS[1], "failingSince"))
  if since then return since end
end
rcall("HSET", KEYS[1], "failingAt", ARGV[1], "failingSince", ARGV[2])
return tonumber(ARGV[2])
