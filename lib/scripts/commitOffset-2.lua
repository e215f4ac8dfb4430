--[[
  Moves a group's committed offset forward, fenced by the lease: a worker whose
  lease was taken over (it paused past the TTL) can never commit. Also extends
  the lease, so a busy partition needs no separate renewals. The offset never
  moves backwards.

  KEYS[1] lease key
  KEYS[2] committed offset key

  ARGV[1] lease token the caller holds ("<workerId>:<epoch>")
  ARGV[2] stream id up to which everything is done
  ARGV[3] lease TTL (ms)

  Returns 1 committed (or already at/after that id), 0 fenced (lease lost).
]]
local rcall = redis.call
if rcall("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
rcall("PEXPIRE", KEYS[1], ARGV[3])

-- Stream ids are "<ms>-<seq>"; seq can exceed a Lua double's exact range, so
-- equal-ms ids are compared as digit strings (longer is larger).
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
return 1
