--[[
  Reads the entries after an id, like XREAD without BLOCK, packed into one
  string with Redis's cmsgpack. A consumer that is behind (its last read came
  back full) reads this way: ioredis then decodes one bulk string per batch
  instead of nine RESP values per entry (an array of two, the id, an array of
  the fields, and each name and value), and the packing runs here, on Redis's
  core, while the consumer handles the batch before. A consumer that is caught
  up waits in XREAD BLOCK instead: nothing polls. Read only.

  KEYS[1] partition stream

  ARGV[1] stream id of the last entry read (the read starts after it)
  ARGV[2] most entries to return

  Returns the MessagePack of XRANGE's answer: an array of entries, each an
  array of its id and the array of its field names and values, every one a
  str; an empty array when no entry follows ARGV[1].
]]
local rcall = redis.call
return cmsgpack.pack(rcall("XRANGE", KEYS[1], "(" .. ARGV[1], "+", "COUNT", ARGV[2]))
