--[[
  Gives a lease back so another worker can take the partition at once, and
  records that this epoch ended cleanly (the next owner counts no crash).

  KEYS[1] lease key
  KEYS[2] recovery hash

  ARGV[1] lease token ("<workerId>:<epoch>")
  ARGV[2] epoch of that token

  Returns 1 released, 0 not held by this token (nothing changed).
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("HSET", KEYS[2], "released", ARGV[2])
  return redis.call("DEL", KEYS[1])
end
return 0
