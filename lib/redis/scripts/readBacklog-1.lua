--[[
  Reads the entries after an id, like XREAD without BLOCK, bounded by bytes
  as well as count. A consumer that is behind (its last read came back full)
  reads this way; one that is caught up waits in XREAD BLOCK instead: nothing
  polls. Read only. The reply holds the entries as XRANGE answers them, so the
  consumer decodes them as it decodes an XREAD.

  Entries are taken in chunks of XRANGE and their bytes summed one by one, so
  the read stops before the entry that would pass the bound whatever the
  sizes of the entries around it. A chunk is as many entries as would fit in
  what is left of the bound at the size of the biggest entry seen so far or
  known to the caller (ARGV[4]), 16 at most; without either, the first chunk
  is one entry. So what Redis holds for one call beyond the entries it
  returns is at most one chunk: its XRANGE reply (in memory `maxmemory`
  counts, freed when the script returns) and its copy in Lua's. Taking
  entries one at a time costs about 1.5 times the Redis CPU per entry of
  chunks of 16; one XRANGE of the whole count would hold a whole batch of
  big entries first.

  An entry's size is the length of its id and of every field name and value,
  plus FRAME bytes for the id and for each field: what a field costs in the
  reply beyond its bytes (a RESP bulk string's header and end), so that
  entries of many empty fields count as what they weigh.

  KEYS[1] partition stream

  ARGV[1] stream id of the last entry read (the read starts after it)
  ARGV[2] most entries to return
  ARGV[3] most bytes to return: an entry that would take the total past it
          is left for the next read, unless it is the first (an entry bigger
          than the bound comes alone)
  ARGV[4] optional: the biggest entry size the caller saw lately, which
          sizes the first chunks

  Returns { entries, largest, left }:
    entries  as XRANGE answers them: each an array of its id and the array of
             its field names and values; an empty array when no entry follows
             ARGV[1]
    largest  the size of the biggest entry returned (0 when none)
    left     the size of the entry left out because of the bound, 0 when the
             read stopped at the count or at the end of the stream
]]
local rcall = redis.call
local stream = KEYS[1]
local after = ARGV[1]
local most = tonumber(ARGV[2])
local bound = tonumber(ARGV[3])
local known = tonumber(ARGV[4]) or 0
local MOST_CHUNK = 16
local FRAME = 8

local entries = {}
local n = 0
local total = 0
local largest = 0
local left = 0
local chunk = 1
if known > 0 then
  chunk = math.max(1, math.min(MOST_CHUNK, math.floor(bound / known)))
end
while n < most do
  local read = rcall("XRANGE", stream, "(" .. after, "+", "COUNT", math.min(chunk, most - n))
  for c = 1, #read do
    local entry = read[c]
    local fields = entry[2]
    local bytes = #entry[1] + FRAME * (#fields + 1)
    for f = 1, #fields do
      bytes = bytes + #fields[f]
    end
    if n > 0 and total + bytes > bound then
      return { entries, largest, bytes }
    end
    n = n + 1
    total = total + bytes
    if bytes > largest then
      largest = bytes
    end
    entries[n] = entry
    after = entry[1]
  end
  if #read < chunk then
    break
  end
  chunk = math.max(1, math.min(MOST_CHUNK, math.floor((bound - total) / math.max(largest, known))))
end
return { entries, largest, left }
