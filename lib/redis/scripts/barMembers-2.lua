--[[
  Bars members of a group from one of its partitions: during a rolling deploy,
  a member without a handler that the group's live members want would commit
  past those events. Each member that sees such a member bars it here on every
  partition, every tick, so the barred one can neither keep working (its lease
  is taken back now, so its next commit and renewal are fenced) nor take the
  partition again (acquireLease-5.lua refuses a barred worker) before its own
  heartbeat tells it what it lacks. It does not wait for the rebalance signal,
  which can be lost.

  A bar is a field "barred:<workerId>" of the recovery hash holding until when
  (ms, Redis clock) it holds: members that see the gap renew it every tick, so
  it ends on its own soon after the gap is gone. A TTL of 0 lifts the bars now.

  KEYS[1] lease key
  KEYS[2] recovery hash

  ARGV[1] how long the bars hold (ms); 0 lifts them
  ARGV[2] n, how many worker ids to bar (or lift) follow
  ARGV[3..2+n] worker ids to bar (or lift)
  ARGV[3+n..] when given: the live members able to work the partition. A
          lease held by anyone else is taken back too: a worker that is not
          a live member (its heartbeat lapsed while it kept committing, as
          during a long hand-back) may lack wanted types as well, unseen.
          It is not barred: it learns what it lacks at its next heartbeat,
          which comes before its next acquire.

  Returns 1 when the lease was taken back, else 0. Taking it back from a
  barred member records the epoch as released: that member is live, it did
  not crash, so the next owner counts no delivery. One taken back from a
  worker that is no live member is not: it may have crashed.
]]
local rcall = redis.call
--@include revoke-lease

local time = rcall("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[1])

local n = tonumber(ARGV[2])
local barred = {}
for i = 3, 2 + n do
  local field = "barred:" .. ARGV[i]
  if ttl > 0 then
    rcall("HSET", KEYS[2], field, now + ttl)
    barred[ARGV[i]] = true
  else
    rcall("HDEL", KEYS[2], field)
  end
end
local able = nil
if #ARGV > 2 + n then
  able = {}
  for i = 3 + n, #ARGV do able[ARGV[i]] = true end
end

-- Bars that ran out (of members long gone) are forgotten here, so the hash stays small.
local fields = rcall("HGETALL", KEYS[2])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 7) == "barred:" and tonumber(fields[i + 1]) <= now then
    rcall("HDEL", KEYS[2], fields[i])
  end
end

local token = rcall("GET", KEYS[1])
-- A lease revoked already (revoke-lease.lua) waits for its holder to clear it, or for its TTL.
if token and string.sub(token, 1, 8) ~= "revoked:" then
  local holder, epoch = string.match(token, "^(.*):(%d+)$")
  if holder and barred[holder] then
    rcall("HSET", KEYS[2], "released", epoch)
    revokeLease(KEYS[1])
    return 1
  end
  if holder and able and not able[holder] then
    -- Not marked released: the holder may have crashed (its heartbeat lapsed), so the next owner
    -- recovers and counts deliveries, as after a lease that expired.
    revokeLease(KEYS[1])
    return 1
  end
end
return 0
