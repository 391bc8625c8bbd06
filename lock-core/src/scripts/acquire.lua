-- Take a lock if it is free (one atomic step: no GET-then-SET race).
--
-- KEYS[1]  the lock key: a string holding the owner token, with a PX expiry (the lease)
-- KEYS[2]  the fence key: an integer counter, incremented once per acquisition
-- ARGV[1]  the caller's owner token (32 hex characters, 128 random bits)
-- ARGV[2]  the lease length in milliseconds
--
-- Returns {1, fence}  acquired (or already ours: a retried call after a lost reply)
--         {0, pttl}   held by another owner; pttl = its remaining lease in ms (-1: no expiry)
--         {-1, i}     KEYS[i] holds a value of another type; nothing was changed

-- The common case first: the lock is free. (SET NX does not fail on a key
-- of another type, it just finds the key taken.)
local set = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if type(set) == 'table' and set.ok then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then
    -- The counter is not a number: undo our own write, change nothing else.
    redis.call('DEL', KEYS[1])
    return {-1, 2}
  end
  return {1, fence}
end

local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  return {-1, 1}
end

if holder == ARGV[1] then
  -- Our own earlier attempt got through but its reply was lost: same lease,
  -- same fence (nobody else can have taken the lock in between).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = redis.pcall('GET', KEYS[2])
  if type(fence) == 'table' then
    return {-1, 2}
  end
  return {1, tonumber(fence) or 0}
end

return {0, redis.call('PTTL', KEYS[1])}
