-- A waiter gives up its place in line (its wait ran out, or it was
-- cancelled). If the lock is free, the new first in line is told.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the line of waiting tokens (list)
-- KEYS[3]  the waiters' places (hash: token -> until when)
-- ARGV[1]  the leaving waiter's owner token
-- ARGV[2]  the release channel of this lock
-- ARGV[3]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns 1 left, 0 it had no place
if redis.call('HDEL', KEYS[3], ARGV[1]) == 0 then
  return 0
end
redis.call('LREM', KEYS[2], 1, ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('LINDEX', KEYS[2], 0)
  if next then
    redis.call(ARGV[3], ARGV[2], 'next:' .. next)
  end
end
return 1
