--[[
  Gives a lease back so another worker can take the partition at once.

  KEYS[1] lease key
  ARGV[1] lease token

  Returns 1 released, 0 not held by this token (nothing changed).
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
