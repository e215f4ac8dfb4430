--[[
  Reads the entries after an id, like XREAD without BLOCK, packed into one
  string with Redis's cmsgpack, and bounded by bytes as well as count. A
  consumer that is behind (its last read came back full) reads this way:
  ioredis then decodes one bulk string per batch instead of nine RESP values
  per entry (an array of two, the id, an array of the fields, and each name
  and value), and the packing runs here, on Redis's core, while the consumer
  handles the batch before. A consumer that is caught up waits in XREAD BLOCK
  instead: nothing polls. Read only.

  Entries are taken one at a time (XRANGE COUNT 1) and the bytes summed as
  they come, so what Redis copies for one call is the entries it returns and
  the one after them, whatever the sizes the consumer saw before: a run of
  small entries followed by big ones is cut at the bound. (One XRANGE of the
  whole count would copy every big entry of the run into Redis's memory
  first.) An entry's size is the length of its id and of every field name and
  value.

  KEYS[1] partition stream

  ARGV[1] stream id of the last entry read (the read starts after it)
  ARGV[2] most entries to return
  ARGV[3] most bytes to return: an entry that would take the total past it
          is left for the next read, unless it is the first (an entry bigger
          than the bound comes alone)

  Returns { packed, largest, left }:
    packed   the MessagePack of the entries as XRANGE answers them: an array
             of entries, each an array of its id and the array of its field
             names and values, every one a str; an empty array when no entry
             follows ARGV[1]
    largest  the size of the biggest entry returned (0 when none)
    left     the size of the entry left out because of the bound, 0 when the
             read stopped at the count or at the end of the stream
]]
local rcall = redis.call
local stream = KEYS[1]
local after = ARGV[1]
local most = tonumber(ARGV[2])
local bound = tonumber(ARGV[3])

local entries = {}
local total = 0
local largest = 0
local left = 0
for n = 1, most do
  local entry = rcall("XRANGE", stream, "(" .. after, "+", "COUNT", 1)[1]
  if not entry then
    break
  end
  local bytes = #entry[1]
  local fields = entry[2]
  for f = 1, #fields do
    bytes = bytes + #fields[f]
  end
  if n > 1 and total + bytes > bound then
    left = bytes
    break
  end
  total = total + bytes
  if bytes > largest then
    largest = bytes
  end
  entries[n] = entry
  after = entry[1]
end
return { cmsgpack.pack(entries), largest, left }
