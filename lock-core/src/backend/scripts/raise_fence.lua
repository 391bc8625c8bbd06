-- Raise a lock's fencing counter to at least a value, if the lock is still
-- ours. Redlock uses it to level the counters of the nodes that granted a
-- lock, so that any later majority sees a counter at least this high.
--
-- KEYS[1]  the lock key (string: owner token)
-- KEYS[2]  the fence key (integer counter, maybe with the line marker)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the fencing token issued for this acquisition
-- ARGV[3]  how long the fence key outlives an acquisition, in milliseconds
--
-- Returns 1 raised (or already that high), 0 not ours, -1 wrong type

local holder = typed('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  return -1
end
if unmarked(holder) ~= ARGV[1] then
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
