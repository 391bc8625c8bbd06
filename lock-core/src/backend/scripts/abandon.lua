-- Give up an acquisition: release the lock if this token holds it (an
-- attempt whose reply never arrived, a lock a release handed to a waiter
-- that was cancelled before it heard of it, or a cancelled acquire), and give up
-- the token's place in line. If the lock is free afterwards, the new first
-- in line is told (or, with nobody in line, anyone listening).
--
-- KEYS[1]  the lock key (string: owner token, '+' in front when someone
--          may wait in line: see acquire.lua)
-- KEYS[2]  the line of waiting tokens (list)
-- KEYS[3]  the waiters' places (hash: token -> until when, in server ms;
--          '~' .. token -> its lease length or grant record, acquire.lua)
-- ARGV[1]  the abandoning owner token
-- ARGV[2]  the release channel of this lock (same hash tag as KEYS[1])
-- ARGV[3]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns 1 it held the lock (now released), 0 it did not

local held = 0
local holder = typed('GET', KEYS[1])
if unmarked(holder) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  held = 1
end
local placed = typed('HDEL', KEYS[3], ARGV[1])
if type(placed) ~= 'number' then
  placed = 0
else
  -- Its lease length, or the record of a lock handed to it (released above).
  redis.call('HDEL', KEYS[3], '~' .. ARGV[1])
end
if placed == 1 then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
end
if (held == 1 or placed == 1) and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = typed('LINDEX', KEYS[2], '0')
  if type(next) == 'string' then
    redis.call(ARGV[3], ARGV[2], 'next:' .. next)
  elseif held == 1 then
    redis.call(ARGV[3], ARGV[2], 'free:' .. ARGV[1])
  end
end
return held
