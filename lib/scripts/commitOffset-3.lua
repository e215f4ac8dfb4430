--[[
  Moves a group's committed offset forward, fenced by the lease: a worker whose
  lease was taken over (it paused past the TTL) can never commit. Also extends
  the lease, so a busy partition needs no separate renewals, and writes the
  idempotency done-marks of the batch in the same atomic step. The offset never
  moves backwards.

  KEYS[1] lease key
  KEYS[2] committed offset key
  KEYS[3] done-marks sorted set (event id scored by expiry ms)

  ARGV[1] lease token the caller holds ("<workerId>:<epoch>")
  ARGV[2] stream id up to which everything is done
  ARGV[3] lease TTL (ms)
  ARGV[4] done-mark TTL (ms); 0 when idempotency is off
  ARGV[5..] event ids to mark done

  Returns 1 committed (or already at/after that id), 0 fenced (lease lost).
]]
local rcall = redis.call
if rcall("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
rcall("PEXPIRE", KEYS[1], ARGV[3])

-- Stream ids are "<ms>-<seq>"; seq can exceed a Lua double's exact range, so
-- ids are compared as digit strings (longer is larger).
local function newer(a, b)
  local ams, aseq = string.match(a, "^(%d+)-(%d+)$")
  local bms, bseq = string.match(b, "^(%d+)-(%d+)$")
  if #ams ~= #bms then return #ams > #bms end
  if ams ~= bms then return ams > bms end
  if #aseq ~= #bseq then return #aseq > #bseq end
  return aseq > bseq
end

local current = rcall("GET", KEYS[2])
if (not current) or newer(ARGV[2], current) then
  rcall("SET", KEYS[2], ARGV[2])
end

local markTtl = tonumber(ARGV[4])
if markTtl > 0 and #ARGV > 4 then
  local time = rcall("TIME")
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local args = {}
  for i = 5, #ARGV do
    args[#args + 1] = now + markTtl
    args[#args + 1] = ARGV[i]
  end
  rcall("ZADD", KEYS[3], unpack(args))
  rcall("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
end
return 1
