#!lua flags=allow-oom
--[[
  Records a partition's archive mark (the last entry archived to a sink) on a
  Redis that is over maxmemory, where Redis refuses a plain HSET: a retention
  cycle archives before it trims, and the trim (which frees memory) checks
  this mark (trimLog-3.lua). The flag allow-oom (Redis 7.0+) lets the script
  write anyway; a mark is one small field. The callers send a plain HSET
  first and come here only on Redis's OOM reply.

  KEYS[1] archive marks hash (sink id -> last archived stream id)

  ARGV[1] archive sink id
  ARGV[2] last stream id archived to it

  Returns 1 when the field was new, 0 when it was updated.
]]
return redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
