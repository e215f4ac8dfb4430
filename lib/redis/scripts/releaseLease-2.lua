--[[
  Gives a lease back so another worker can take the partition at once, and
  records that this epoch ended cleanly (the next owner counts no crash).

  A lease an operator revoked (resetOffset-6.lua, barMembers-2.lua) is held
  as "revoked:<token>" for the rest of its TTL, so no one takes the
  partition while its holder may still run handlers it started. The holder
  clears it here once its handlers have ended; it records nothing (the
  revoking script already did).

  KEYS[1] lease key
  KEYS[2] recovery hash

  ARGV[1] lease token ("<workerId>:<epoch>")
  ARGV[2] epoch of that token

  Returns 1 released, 2 its revoked lease cleared, 0 not held by this token
  (nothing changed).
]]
local current = redis.call("GET", KEYS[1])
if current == ARGV[1] then
  redis.call("HSET", KEYS[2], "released", ARGV[2])
  return redis.call("DEL", KEYS[1])
end
if current == "revoked:" .. ARGV[1] then
  redis.call("DEL", KEYS[1])
  return 2
end
return 0
