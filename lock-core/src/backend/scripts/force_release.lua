-- An operator's release: delete the lock whoever holds it, wake the next
-- waiter, and leave a marker that tells the old holder why its lease is gone.
--
-- KEYS[1]  the lock key (string: owner token)
-- KEYS[2]  the line of waiting tokens (list, first come first served)
-- KEYS[3]  the forced marker: set to the old owner token, expiring with the
--          old lease (at least ARGV[3] ms), so that the old holder's next
--          renewal (renew.lua) answers "force-released" instead of "not ours"
-- ARGV[1]  the release channel of this lock (same hash tag as KEYS[1])
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the shortest life of the marker, in milliseconds
--
-- Announces `next:<first in line>`, or `free:<old token>` when nobody waits,
-- as release.lua does.
--
-- Returns {1, old token, next}  it was held (next: the first in line, or nil)
--         {0, nil, nil}         it was free
--         {-1, nil, nil}        the lock key holds a value of another type
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  return {-1, false, false}
end
if not holder then
  return {0, false, false}
end
holder = unmarked(holder)
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[3], holder, 'PX', math.max(pttl, tonumber(ARGV[3])))

local next = redis.pcall('LINDEX', KEYS[2], '0')
if type(next) ~= 'string' then
  redis.call(ARGV[2], ARGV[1], 'free:' .. holder)
  return {1, holder, false}
end
redis.call(ARGV[2], ARGV[1], 'next:' .. next)
return {1, holder, next}
