--[[
  Releases a lock only if it still holds the caller's token, so a holder whose
  lock expired and was taken by another instance never deletes the new one.

  KEYS[1] lock key

  ARGV[1] token the caller set it with

  Returns 1 released, 0 not held by this token (nothing changed).
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
