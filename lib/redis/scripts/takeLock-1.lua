#!lua flags=allow-oom
--[[
  Takes a lock (SET NX PX) on a Redis that is over maxmemory, where Redis
  refuses a plain SET: the callers are the operations that free memory (a
  retention cycle), which must run on a full Redis. The flag allow-oom
  (Redis 7.0+) lets the script write anyway; the lock is one small key. The
  callers send a plain SET first and come here only on Redis's OOM reply, so
  Redis 6.2, which cannot read the flag, still takes locks on a Redis that
  is not full.

  KEYS[1] lock key

  ARGV[1] token to set it to
  ARGV[2] TTL (ms)

  Returns 1 when taken, 0 when the key is held already (nothing changed).
]]
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 1
end
return 0
