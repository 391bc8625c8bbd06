-- Renew leases (as renew.lua does) and record their fencing tokens, for
-- `inspect`: for leases the fast acquisition (fast.rs) took without writing
-- their tokens anywhere. The watchdog sends it once per such lease, only
-- for leases still held a moment after their grant (most locks are given
-- back sooner and never pay for it); usually a check only (TTL 0).
--
-- KEYS[2i-1]  lease i's lock key
-- KEYS[2i]    lease i's grant record (same hash tag): a string
--             '<fencing token> <owner token>'
-- ARGV[3i-2]  lease i's owner token
-- ARGV[3i-1]  lease i's new lease length in ms; 0: only check that it is ours
-- ARGV[3i]    lease i's fencing token (decimal)
-- ARGV[#ARGV] how long a record outlives its lock's current lease, in ms
--
-- A record is written only while the lock is its owner's (the line marker
-- aside), so a late call never labels someone else's lease; inspect.lua
-- trusts a record only when its owner token is the holder's.
--
-- Returns renew.lua's codes, one per lease: 1 ours (renewed, recorded), 0
-- not ours, -1 a value of another type, -2 released by an operator.
local life = tonumber(ARGV[#ARGV])
local result = {}
for i = 1, #KEYS / 2 do
  local lock, token, ttl = KEYS[2 * i - 1], ARGV[3 * i - 2], ARGV[3 * i - 1]
  local holder = typed('GET', lock)
  if type(holder) == 'table' and holder.err then
    result[i] = -1
  elseif unmarked(holder) == token then
    if ttl ~= '0' then
      redis.call('PEXPIRE', lock, ttl)
    end
    local left = math.max(redis.call('PTTL', lock), 0)
    redis.call('SET', KEYS[2 * i], ARGV[3 * i] .. ' ' .. token, 'PX', left + life)
    result[i] = 1
  else
    result[i] = 0
    local forced = string.sub(lock, 1, -6) .. ':forced'
    if string.sub(lock, -5) == ':lock' and redis.pcall('GET', forced) == token then
      result[i] = -2
    end
  end
end
return result
