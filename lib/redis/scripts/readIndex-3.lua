--[[
  What a worker that is behind needs to read a partition with plain XRANGE
  and still know each read's size beforehand (see index-big.lua): from where
  the partition's index of big entries is complete, the first big entry
  after the worker's offset, and Redis's time. Every entry after the offset
  and before both the next big entry and the time was appended before this
  call and is not big; entries appended after it have later ids (XADD gives
  ids from Redis's clock, never below the last one).

  The first call on a partition that has no indexed-from mark sets it to the
  stream's last id (or 0-0 when there is no stream): entries up to there may
  be big without being indexed (appended before eventrail indexed them), and
  are read with the byte-counting script (readBacklog-1.lua).

  KEYS[1] partition stream
  KEYS[2] the partition's index of big entries
  KEYS[3] the partition's indexed-from mark

  ARGV[1] the worker's offset: the stream id of the last entry it read

  Returns { from, next, now }:
    from  the indexed-from mark: a stream id, or "none" when a writer
          appended a big entry it could not index
    next  the id of the first big entry after ARGV[1], or "" when none
    now   Redis's time in ms
]]
local rcall = redis.call
local after = ARGV[1]

--@include stream-position

local time = rcall("TIME")
local now = time[1] .. string.format("%03d", math.floor(tonumber(time[2]) / 1000))

local from = rcall("GET", KEYS[3])
if not from then
  local facts = streamFacts(KEYS[1])
  from = facts and facts.lastGenerated or "0-0"
  -- On a full Redis the mark is not written; this read still knows it, the next one asks again.
  redis.pcall("SET", KEYS[3], from)
end
if from == "none" then
  return { from, "", now }
end

-- Scored by the id's milliseconds: ids of the same millisecond are compared here, a page at a time.
local afterMs = string.match(after, "^%d+")
local offset = 0
while true do
  local page = rcall("ZRANGEBYSCORE", KEYS[2], afterMs, "+inf", "LIMIT", offset, 16)
  local next = nil
  for _, id in ipairs(page) do
    if idCompare(id, after) > 0 and (next == nil or idCompare(id, next) < 0) then
      next = id
    end
  end
  if next then
    -- Ids of next's millisecond may go on past this page (and sort as strings): take the least of them all.
    local ms = string.match(next, "^%d+")
    for _, id in ipairs(rcall("ZRANGEBYSCORE", KEYS[2], ms, ms)) do
      if idCompare(id, after) > 0 and idCompare(id, next) < 0 then
        next = id
      end
    end
    return { from, next, now }
  end
  if #page < 16 then
    return { from, "", now }
  end
  offset = offset + 16
end
