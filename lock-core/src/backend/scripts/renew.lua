-- Renew many leases at once (the watchdog's batch) or one (extend).
--
-- KEYS[i]       the lock key of lease i (the owner token, with '+' in front
--               when someone may wait in line: see acquire.lua)
-- ARGV[2i - 1]  the owner token of lease i
-- ARGV[2i]      the new lease length of lease i, in milliseconds (counted from
--               now); 0: only check that it is ours, leave its expiry alone
--
-- Returns one integer per lease: 1 renewed, 0 not ours (gone, or another
-- owner's: the lease is lost), -1 the key holds a value of another type,
-- -2 not ours because an operator released it (force_release.lua left the
-- marker `<lock key without :lock>:forced` holding this token; it shares the
-- lock's hash tag, so the same slot, and is read only on this failure path)

local result = {}
for i = 1, #KEYS do
  local holder = typed('GET', KEYS[i])
  if type(holder) == 'table' and holder.err then
    result[i] = -1
  elseif unmarked(holder) == ARGV[2 * i - 1] then
    if ARGV[2 * i] ~= '0' then
      redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    end
    result[i] = 1
  else
    result[i] = 0
    local forced = string.sub(KEYS[i], 1, -6) .. ':forced'
    if string.sub(KEYS[i], -5) == ':lock' and redis.pcall('GET', forced) == ARGV[2 * i - 1] then
      result[i] = -2
    end
  end
end
return result
