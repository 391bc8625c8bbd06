-- Take a lock if it is free and nobody is waiting in line before us (one
-- atomic step: no GET-then-SET race, no barging past earlier waiters).
--
-- KEYS[1]  the lock key: a string holding the owner token, with a PX expiry (the lease)
-- KEYS[2]  the fence key: the last fencing token issued (an integer), raised
--          once per acquisition, forgotten ARGV[3] ms after the last one
-- KEYS[3]  the line: a list of waiting owner tokens, first come first served
-- KEYS[4]  the places: a hash, waiting token -> until when (server ms) its
--          place is kept; a waiter renews it each time it tries
-- ARGV[1]  the caller's owner token (32 hex characters, 128 random bits)
-- ARGV[2]  the lease length in milliseconds
-- ARGV[3]  how long the fence key outlives an acquisition, in milliseconds
-- ARGV[4]  0: one try, do not wait in line; > 0: wait in line, and keep the
--          place this many ms longer than the caller will sleep
-- ARGV[5]  the floor of a new fencing token: 0 for the server clock in µs;
--          otherwise this number (Redlock sends its client's clock, the same
--          to every node, so that nodes in step issue the same token)
--
-- Returns fence     (a string: the fencing token, in decimal) acquired, or
--                   already ours (a retried call after a lost reply)
--         ms        (an integer) not now; look again within ms (-1: no expiry
--                   known): the lock is held, or kept for the first in line
--         {-1, i}   KEYS[i] holds a value of another type; nothing was changed
-- (Plain values, not a table, on the common paths: Redis converts a table
-- reply field by field, which showed in its CPU time.)

local token = ARGV[1]

local head = typed('LINDEX', KEYS[3], '0')
if type(head) == 'table' then
  return {-1, 3}
end

local now
if head then
  -- Places not renewed in time belong to waiters that crashed or left.
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while head do
    local kept = typed('HGET', KEYS[4], head)
    if type(kept) == 'table' then
      return {-1, 4}
    end
    if (tonumber(kept) or 0) > now then
      break
    end
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], head)
    head = redis.call('LINDEX', KEYS[3], '0')
  end
end

-- Nobody waits before us: the lock is ours if free. (SET NX does not fail
-- on a key of another type, it just finds the key taken: no `typed` needed.)
local first = not head or head == token
if first and redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
  local fence
  -- The next token is one above the last and at least the server clock
  -- in microseconds. So it is above every token issued before even when
  -- the counter was lost or set back with the server's data (a restart
  -- without persistence, FLUSHDB, eviction, a failover to a replica that
  -- missed the last increments): a counter cannot outrun a microsecond
  -- clock (that would take over a million acquisitions per second of one
  -- lock), unless the clock stepped back. A counter unused for ARGV[3] ms
  -- is forgotten, so unused lock names leave nothing behind.
  -- The clock in µs is written from TIME's two parts as a string: no
  -- number formatting on the common path (it showed in Redis' profile).
  if ARGV[5] == '0' then
    local t = redis.call('TIME')
    fence = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  else
    fence = ARGV[5]
  end
  -- Write the floor and read the last token in one command (SET .. GET
  -- leaves a key of another type alone and answers WRONGTYPE); the
  -- counter is written a second time only when it was at or above the
  -- floor (a clock that stepped back, or Redlock's counters ahead).
  local last = typed('SET', KEYS[2], fence, 'PX', ARGV[3], 'GET')
  if type(last) == 'table' or (last and not tonumber(last)) then
    -- The counter is not a number: undo our own writes (the foreign
    -- value goes back, without an expiry), change nothing else.
    redis.call('DEL', KEYS[1])
    if type(last) == 'string' then
      redis.call('SET', KEYS[2], last)
    end
    return {-1, 2}
  end
  local prior = tonumber(last)
  if prior and prior >= tonumber(fence) then
    fence = string.format('%d', prior + 1)
    redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
  end
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], token)
  end
  return fence
end

-- Ours already: an earlier attempt got through but its reply was lost (a
-- retried call). Same lease, same fence: nobody else can have taken it in
-- between.
local holder = typed('GET', KEYS[1])
if type(holder) == 'table' then
  if first then
    return {-1, 1}
  end
  -- Behind someone in line, the lock key's type does not matter yet.
  holder = false
end
if holder == token then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = typed('GET', KEYS[2])
  if type(fence) == 'table' then
    return {-1, 2}
  end
  if head == token then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], token)
  end
  return fence or '0'
end

local sleep = redis.call('PTTL', KEYS[1])
if sleep < 0 and not first then
  -- Someone came first, and the lock is free (or without expiry): it is
  -- kept for the first in line until its place lapses.
  sleep = tonumber(redis.call('HGET', KEYS[4], head)) - now
end

-- Not now: keep (or take) the caller's place in line while it sleeps.
local grace = tonumber(ARGV[4])
if grace > 0 then
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local keep = math.max(sleep, 0) + grace
  if redis.call('HSET', KEYS[4], token, now + keep) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  if redis.call('PTTL', KEYS[3]) < keep then
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
return sleep
