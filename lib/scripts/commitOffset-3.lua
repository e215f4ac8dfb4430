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

  Every step that can fail (reading the offsets, writing the marks) runs
  before the offset moves: a script that errors is not rolled back, so an
  offset written first would leave the batch committed without its marks.
  Marks go in chunks because Lua's unpack hands at most about 8000 values to
  one call, and a batch can hold 10000 ids.
]]
local rcall = redis.call
-- Values per ZADD: well under unpack's limit of about 8000.
local CHUNK = 1000

if rcall("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end

-- Stream ids are "<ms>-<seq>"; seq can exceed a Lua double's exact range, so
-- ids are compared as digit strings (longer is larger).
local function parse(id, what)
  local ms, seq = string.match(id, "^(%d+)-(%d+)$")
  if not ms then
    error("eventrail commitOffset: " .. what .. " is not a stream id: " .. id)
  end
  return ms, seq
end
local function newer(a, b)
  local ams, aseq = parse(a, "the new offset")
  local bms, bseq = parse(b, "the committed offset")
  if #ams ~= #bms then return #ams > #bms end
  if ams ~= bms then return ams > bms end
  if #aseq ~= #bseq then return #aseq > #bseq end
  return aseq > bseq
end

local current = rcall("GET", KEYS[2])
parse(ARGV[2], "the new offset")
local advance = (not current) or newer(ARGV[2], current)

local markTtl = tonumber(ARGV[4])
if markTtl > 0 and #ARGV > 4 then
  local time = rcall("TIME")
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local expiry = now + markTtl
  local args = {}
  for i = 5, #ARGV do
    args[#args + 1] = expiry
    args[#args + 1] = ARGV[i]
    if #args >= CHUNK then
      rcall("ZADD", KEYS[3], unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    rcall("ZADD", KEYS[3], unpack(args))
  end
  rcall("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
end

-- Neither can fail once the checks above passed.
rcall("PEXPIRE", KEYS[1], ARGV[3])
if advance then
  rcall("SET", KEYS[2], ARGV[2])
end
return 1
