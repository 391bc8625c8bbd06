-- Take a lock if it is free (one atomic step: no GET-then-SET race).
--
-- KEYS[1]  the lock key: a string holding the owner token, with a PX expiry (the lease)
-- KEYS[2]  the fence key: an integer counter, incremented once per acquisition,
--          forgotten ARGV[3] ms after the last one
-- ARGV[1]  the caller's owner token (32 hex characters, 128 random bits)
-- ARGV[2]  the lease length in milliseconds
-- ARGV[3]  how long the fence key outlives an acquisition, in milliseconds
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
  if fence == 1 then
    -- A new counter (first use of this name, or forgotten after ARGV[3] ms
    -- without acquisitions) starts at the server clock, in microseconds
    -- rounded down to the second: it is then above every token issued before
    -- (a counter cannot outrun a microsecond clock: that would take over a
    -- million acquisitions per second of one lock), unless the clock stepped
    -- back by more than the time the counter was forgotten for. The rounding
    -- makes Redlock masters whose clocks agree to the second start equal.
    local now = redis.call('TIME')
    fence = tonumber(now[1]) * 1000000
    redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3])
  else
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
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
