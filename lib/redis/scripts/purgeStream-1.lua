--[[
  Deletes a stream (a group's dead letters) and answers how many entries it
  held, in one atomic step. A script rather than MULTI/EXEC: Redis refuses
  every command queued in a MULTI while it is over maxmemory, and a purge
  must free memory on a full Redis. Neither XLEN nor DEL may grow memory, so
  Redis runs this script on a full Redis without any flag (Redis 6.2 too).

  KEYS[1] stream

  Returns the number of entries deleted (0 when there was no stream).
]]
local count = redis.call("XLEN", KEYS[1])
redis.call("DEL", KEYS[1])
return count
