-- Give a lock back, only if it is still ours, and tell the waiters.
--
-- KEYS[1]  the lock key (string: owner token)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  keep, in milliseconds: 0 deletes the key now and announces the
--          release; > 0 leaves the (still owned) key to expire after that many
--          ms (`at_least`: a skip-if-locked job must not run again too soon)
-- ARGV[3]  the release channel of this lock (same hash tag as KEYS[1])
-- ARGV[4]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns 1 + n released (n: the clients that received the announcement; 0
--         when kept for at_least), 0 not ours (expired, or another owner's),
--         -1 wrong type
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  return -1
end
if holder ~= ARGV[1] then
  return 0
end

local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
  return 1
end

redis.call('DEL', KEYS[1])
-- The message is the released token, so a client that announced this
-- release locally already can recognise it.
return 1 + redis.call(ARGV[4], ARGV[3], ARGV[1])
