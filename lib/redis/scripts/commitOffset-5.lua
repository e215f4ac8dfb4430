--[[
  Moves a group's committed offset forward, fenced by the lease: a worker whose
  lease was taken over (it paused past the TTL) can never commit. Also extends
  the lease, so a busy partition needs no separate renewals, writes the
  idempotency done-marks of the batch, and keeps the offset's lag position
  (see stream-position.lua), all in the same atomic step. The offset never
  moves backwards.

  KEYS[1] lease key
  KEYS[2] committed offset key
  KEYS[3] done-marks sorted set (event id scored by expiry ms)
  KEYS[4] recovery hash (its "position" field; the failure memory's fields
          are removed once the offset reaches the failing entry)
  KEYS[5] partition stream

  ARGV[1] lease token the caller holds ("<workerId>:<epoch>")
  ARGV[2] stream id up to which everything is done
  ARGV[3] lease TTL (ms)
  ARGV[4] done-mark TTL (ms); 0 when idempotency is off
  ARGV[5] the offset the caller's last commit moved to (or found at acquire)
  ARGV[6] the first entry the caller read after it ("" when unknown)
  ARGV[7] how many entries the caller read from ARGV[6] up to ARGV[2],
          both included ("" when unknown)
  ARGV[8] "1" to check the position against XINFO STREAM now (the caller
          asks for it now and then), else "0"
  ARGV[9] n: how many pairs follow, parked lines that change in this commit
          and the floor ("0" on the happy path)
  ARGV[10..9+2n] pairs of a parked line's field ("park:<line>") and its new
          state (JSON), or "" when the line is released. Written in the same
          step as the offset: an entry is never committed past before the line
          that holds it is stored. The last pair may be "parkedFloor" and the
          oldest parked id (which retention keeps), "" when nothing is parked:
          the caller holds every line and knows it. Without that pair the
          floor is worked out again from every line of the hash (HGETALL:
          O(lines), 250 ms at 20,000 lines).
  ARGV[10+2n..] event ids to mark done

  Returns 1 committed (or already at/after that id), 0 fenced (lease lost).

  The position of the new offset (see stream-position.lua): the entries the
  caller read are consecutive in the stream, so position(new) =
  position(ARGV[5]) + count, with the same anchor, at the cost of an HGET and
  an HSET. When the caller asks for a check, or nothing usable is stored,
  XINFO STREAM (O(1): it decodes the first and last entry) gives it instead
  and the new offset becomes the anchor: from the stream alone when it can
  (caught up, or behind a trim); from the stored position when no entry
  after its anchor was ever removed; or, when ARGV[5] lies before the first
  entry and the caller's read began at that first entry, entries-added -
  length + count. Anything else (an entry after the anchor deleted, an
  earlier commit the caller did not hear of) forgets the position, and
  readers count until a later commit knows it again.

  Every step that can fail (reading the offsets, writing the marks and the
  position) runs before the offset moves: a script that errors is not rolled
  back, so an offset written first would leave the batch committed without
  its marks. Marks go in chunks because Lua's unpack hands at most about 8000
  values to one call, and a batch can hold 10000 ids.
]]
local rcall = redis.call
-- Values per ZADD: well under unpack's limit of about 8000.
local CHUNK = 1000
--@include stream-position

if rcall("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end

local function checked(id, what)
  if not string.match(id, "^%d+-%d+$") then
    error("eventrail commitOffset: " .. what .. " is not a stream id: " .. id)
  end
  return id
end

local current = rcall("GET", KEYS[2])
local offset = checked(ARGV[2], "the new offset")
local advance = (not current) or idCompare(offset, checked(current, "the committed offset")) > 0

local parkedChanges = tonumber(ARGV[9]) or error("eventrail commitOffset: the parked-line count is not a number: " .. tostring(ARGV[9]))
local firstId = 10 + 2 * parkedChanges
local givenFloor
for i = 10, firstId - 1, 2 do
  if ARGV[i] == "parkedFloor" and i == firstId - 2 then
    if ARGV[i + 1] ~= "" then checked(ARGV[i + 1], "the parked floor") end
    givenFloor = ARGV[i + 1]
  elseif string.sub(ARGV[i], 1, 5) ~= "park:" then
    error("eventrail commitOffset: not a parked line field: " .. ARGV[i])
  end
end

local markTtl = tonumber(ARGV[4])
if markTtl > 0 and #ARGV >= firstId then
  local time = rcall("TIME")
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local expiry = now + markTtl
  local args = {}
  for i = firstId, #ARGV do
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

-- The position of the new offset and its anchor (nil when it cannot be known exactly).
local function newPosition()
  local since, from, count = ARGV[5], ARGV[6], tonumber(ARGV[7])
  local counted = current == since and count and from ~= ""
  local base, anchor
  if counted then base, anchor = storedPosition(KEYS[4], since) end
  if base and ARGV[8] ~= "1" then return base + count, anchor end

  local facts = streamFacts(KEYS[5])
  local position, plainAnchor = plainPosition(facts, offset)
  if position or not counted or not facts or not facts.added or facts.length == 0 then return position, plainAnchor end
  if base and intactFrom(facts, anchor) then
    position = base + count
  elseif idCompare(since, facts.first) < 0 and from == facts.first and idCompare(facts.maxDeleted, from) < 0 then
    position = facts.added - facts.length + count
  end
  -- The lag it gives must lie between 1 and the length (the offset is before the last entry).
  if position and (facts.added - position < 1 or facts.added - position > facts.length) then return nil end
  return position, offset
end

if advance then
  local position, anchor = newPosition()
  storePosition(KEYS[4], offset, position, anchor)
  -- The failure memory (markFailure-1.lua) of an entry now committed is over:
  -- were it kept, the entry handled again later (a reset) would start its
  -- retry budget already spent.
  local failingAt = rcall("HGET", KEYS[4], "failingAt")
  if failingAt and string.match(failingAt, "^%d+-%d+$") and idCompare(offset, failingAt) >= 0 then
    rcall("HDEL", KEYS[4], "failingAt", "failingSince")
  end
end
-- Parked lines: set or released, then the floor (the first id of the oldest line) again.
if parkedChanges > 0 then
  local lastLine = givenFloor and firstId - 4 or firstId - 2
  for i = 10, lastLine, 2 do
    if ARGV[i + 1] == "" then
      rcall("HDEL", KEYS[4], ARGV[i])
    else
      rcall("HSET", KEYS[4], ARGV[i], ARGV[i + 1])
    end
  end
  local floor = givenFloor
  if not floor then
    local fields = rcall("HGETALL", KEYS[4])
    for i = 1, #fields, 2 do
      if string.sub(fields[i], 1, 5) == "park:" then
        local first = string.match(fields[i + 1], '"ids":%["(%d+%-%d+)"')
        if first and (not floor or idCompare(first, floor) < 0) then floor = first end
      end
    end
  end
  if floor and floor ~= "" then
    rcall("HSET", KEYS[4], "parkedFloor", floor)
  else
    rcall("HDEL", KEYS[4], "parkedFloor")
  end
end
-- Neither can fail once the checks above passed.
rcall("PEXPIRE", KEYS[1], ARGV[3])
if advance then
  rcall("SET", KEYS[2], offset)
end
return 1
