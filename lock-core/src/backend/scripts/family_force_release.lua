-- An operator's release of a semaphore or read-write lock: every holder
-- loses its permit or side at once, the first in line is woken, and a marker
-- tells each old holder why.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list)
-- KEYS[3]  the forced marker: a set of the old owner tokens, expiring with
--          the longest old lease (at least ARGV[3] ms), so that each old
--          holder's next renewal (family_renew.lua) answers "force-released"
-- ARGV[1]  the release channel (same hash tag as KEYS[1])
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the shortest life of the marker, in ms
--
-- Returns {1, a holder's token, next}  it was held (next: the first in line
--                                      told `next:<token>`, or nil)
--         {0, nil, nil}                nobody held it
--         {-1, nil, nil}               KEYS[1] is not a hash of holders
local all = redis.pcall('HGETALL', KEYS[1])
if all.err then
  return {-1, false, false}
end
if #all == 0 then
  return {0, false, false}
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
for i = 1, #all, 2 do
  redis.call('SADD', KEYS[3], all[i])
end
redis.call('PEXPIRE', KEYS[3], math.max(pttl, tonumber(ARGV[3])))
local next = redis.pcall('LINDEX', KEYS[2], '0')
if type(next) ~= 'string' then
  return {1, all[1], false}
end
redis.call(ARGV[2], ARGV[1], 'next:' .. next)
return {1, all[1], next}
