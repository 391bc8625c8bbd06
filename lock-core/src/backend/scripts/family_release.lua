-- Give back a permit of a semaphore or a side of a read-write lock, only if
-- it is still ours, and name the first in line if it may go now.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list, first come first served)
-- KEYS[3]  the waiters' places (hash: token -> <kind><until>)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the caller's kind: s, r or w
-- ARGV[3]  keep, in ms: 0 gives it back now; > 0 leaves it (still ours) to
--          end after that many ms (`at_least`)
-- ARGV[4]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[5]  the release channel (same hash tag)
-- ARGV[6]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns next  (a string) released, and next (first in line) may go now:
--               it was told `next:<token>`
--         1     released (nobody in line may go yet, or a keep)
--         0     not ours (expired, or another owner's)
--         -1    wrong type

local token, kind = ARGV[1], ARGV[2]
local now = clock_ms()
local mine = typed('HGET', KEYS[1], token)
if type(mine) == 'table' then
  return -1
end
local k, untl, fence = string.match(mine or '', '^(%a)(%d+):(%d+)$')
if not k or tonumber(untl) <= now then
  return 0
end
local keep = tonumber(ARGV[3])
if keep > 0 then
  redis.call('HSET', KEYS[1], token, k .. (now + keep) .. ':' .. fence)
  outlive(KEYS[1], now, now + keep)
  return 1
end
redis.call('HDEL', KEYS[1], token)
local holders = live_holders(KEYS[1], kind, now)
if not holders then
  return -1
end
if #holders == 0 then
  redis.call('DEL', KEYS[1])
end
local line = live_line(KEYS[2], KEYS[3], kind, now)
local next = line and line[1]
if next and may_go(next[2], 1, holders, line, tonumber(ARGV[4])) then
  redis.call(ARGV[6], ARGV[5], 'next:' .. next[1])
  return next[1]
end
return 1
