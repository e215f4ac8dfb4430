--[[
  Extends a lease the caller still holds.

  KEYS[1] lease key
  ARGV[1] lease token
  ARGV[2] lease TTL (ms)

  Returns 1 renewed, 0 lost (expired or taken over).
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
