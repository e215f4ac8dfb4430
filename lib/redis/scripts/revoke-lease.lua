--[[
  Shared by the scripts that take a lease from its holder without its consent
  (the loader pastes it where a script says `--@include revoke-lease`; it is
  not a script itself): an operator's forced offset reset (resetOffset-6.lua)
  and a bar during a rolling deploy (barMembers-2.lua).

  The holder's lease becomes "revoked:<token>" for the rest of its TTL rather
  than going: its commits and renewals are fenced at once, and no one (the
  holder included: acquireLease-5.lua takes only a lease of its own id) can
  take the partition until the holder has ended the handlers it started and
  cleared it (releaseLease-2.lua), or until its lease would have expired
  anyway, by which time a holder that never heard of the revocation has
  stopped starting handlers (it cannot tell its lease still holds). Deleting
  the lease let a holder that missed the rebalance signal run entries that a
  new owner had already handled and marked done.
]]
local function revokeLease(key)
  local holder = redis.call("GET", key)
  if not holder or string.sub(holder, 1, 8) == "revoked:" then return end
  local left = redis.call("PTTL", key)
  if left > 0 then
    redis.call("SET", key, "revoked:" .. holder, "PX", left)
  else
    redis.call("DEL", key)
  end
end
