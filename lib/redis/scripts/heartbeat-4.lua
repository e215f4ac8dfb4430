--[[
  Records that a worker is alive, forgets members whose heartbeat expired, and
  returns the live members and the group's generation. Uses the server clock
  so hosts need no clock sync.

  KEYS[1] members sorted set (worker id scored by expiry ms)
  KEYS[2] member info hash (worker id -> JSON)
  KEYS[3] last-seen key of the group (ms of the latest heartbeat of any member)
  KEYS[4] generation counter of the group (bumped by dropGroup-6.lua)

  ARGV[1] worker id
  ARGV[2] heartbeat TTL (ms)
  ARGV[3] member info JSON

  Returns { generation, { live worker ids, sorted } }. The generation tells a
  worker whose group was deleted meanwhile to register it again, and stamps
  the partitions it acquires (acquireLease-5.lua), so a delete of the dropped
  incarnation's partition keys never touches the ones it creates.

  Expired members' details are removed in chunks: Lua's unpack hands at most
  about 8000 values to one call, and a fleet that lost thousands of workers at
  once expires them all in the same heartbeat.
]]
local rcall = redis.call
-- Values per HDEL: well under unpack's limit.
local CHUNK = 1000
local time = rcall("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local expired = rcall("ZRANGEBYSCORE", KEYS[1], "-inf", now)
if #expired > 0 then
  for i = 1, #expired, CHUNK do
    rcall("HDEL", KEYS[2], unpack(expired, i, math.min(i + CHUNK - 1, #expired)))
  end
  rcall("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
end
rcall("ZADD", KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
rcall("HSET", KEYS[2], ARGV[1], ARGV[3])
rcall("SET", KEYS[3], now)
return { rcall("GET", KEYS[4]) or "0", rcall("ZRANGE", KEYS[1], 0, -1) }
