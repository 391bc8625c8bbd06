-- Raise a lock's fencing counter to at least a value, if the lock is still
-- ours (or, with ARGV[4] = 1, whoever holds it). Redlock uses it to level
-- the counters of the nodes that granted a lock, so that any later majority
-- sees a counter at least this high, and then those of the other nodes, so
-- that a later majority still does when a granting node lost its data.
-- (A counter only ever goes up: raising it to an issued token is safe
-- whoever holds the lock there.)
--
-- KEYS[1]  the lock key (string: owner token)
-- KEYS[2]  the fence key (integer counter, maybe with the line marker)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the fencing token issued for this acquisition
-- ARGV[3]  how long the fence key outlives an acquisition, in milliseconds
-- ARGV[4]  1: raise it even if the lock is not ours there; 0: only if it is
--
-- Returns 1 raised (or already that high), 0 not ours, -1 wrong type

local holder = typed('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  return -1
end
if ARGV[4] ~= '1' and unmarked(holder) ~= ARGV[1] then
  return 0
end
local current = typed('GET', KEYS[2])
if type(current) == 'table' and current.err then
  return -1
end
-- Keep the line marker if there is one.
local last, marked = unmarked(current)
if (tonumber(last) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], (marked and '+' or '') .. ARGV[2], 'PX', ARGV[3])
end
return 1
