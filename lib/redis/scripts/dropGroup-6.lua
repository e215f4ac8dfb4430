--[[
  Deletes a group's own keys (those in the group's hash tag) if, at this
  instant on the Redis clock, it has no live member (and, for a prune, was
  last seen longer ago than the threshold), and bumps the group's generation,
  which survives as a tombstone. Checking and deleting in one step is what
  keeps a worker that joins meanwhile from being wiped: its heartbeat
  (heartbeat-4.lua) runs either before (and this refuses) or after (and it
  re-creates the group, at the new generation).

  The group's partition keys live in other hash tags; the caller drops them
  next with dropGroupPartition-4.lua and this generation, which spares those
  that a worker of the new generation already took.

  KEYS[1] members sorted set
  KEYS[2] member info hash
  KEYS[3] event types set
  KEYS[4] last-seen key
  KEYS[5] dead-letter stream
  KEYS[6] generation counter (kept)

  ARGV[1] "stale": only without a live member and last seen more than ARGV[2] ms ago
          "idle": only without a live member
          "force": even with live members (they are fenced by the partition drop)
  ARGV[2] stale threshold (ms), for "stale"

  Returns { "dropped", generation }, { "live", worker ids... } or { "recent" }.
]]
local rcall = redis.call
local time = rcall("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local mode = ARGV[1]

if mode ~= "force" then
  -- Live: the heartbeat expiry is still ahead (the rule of group-facts.reader.ts).
  local live = rcall("ZRANGEBYSCORE", KEYS[1], "(" .. now, "+inf")
  if #live > 0 then
    table.insert(live, 1, "live")
    return live
  end
  if mode == "stale" and now - tonumber(rcall("GET", KEYS[4]) or "0") <= tonumber(ARGV[2]) then
    return { "recent" }
  end
end

rcall("DEL", KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return { "dropped", tostring(rcall("INCR", KEYS[6])) }
