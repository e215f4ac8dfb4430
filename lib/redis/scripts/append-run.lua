--[[
  Shared by appendMany-n and appendManyDedup-n (pasted where a script says
  `--@include append-run`; not a script itself): a run of events in ARGV from
  position `from`, each its number of field arguments, then those arguments
  (field/value pairs, as one XADD takes them).

  runEvents(from) counts the events, or returns nil and the position of the
  first malformed count: not a number, odd, under 2, more than one XADD can
  take from Lua (unpack hands at most about 8000 values to one call), or
  running past the end. Scripts check the whole run first, so a malformed
  call writes nothing.
]]
local MAX_FIELD_ARGS = 7000
local function runEvents(from)
  local i = from
  local events = 0
  while i <= #ARGV do
    local count = tonumber(ARGV[i])
    if count == nil or count < 2 or count % 2 ~= 0 or count > MAX_FIELD_ARGS or i + count > #ARGV then
      return nil, i
    end
    events = events + 1
    i = i + 1 + count
  end
  return events
end
