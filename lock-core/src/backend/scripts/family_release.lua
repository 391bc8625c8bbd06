-- Give back a permit of a semaphore or a side of a read-write lock, only if
-- it is still ours, and name the first in line if it may go now.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list, first come first served)
-- KEYS[3]  the waiters' places (hash: token -> <kind><until>)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the caller's kind: s, r or w
-- ARGV[3]  keep, in ms: 0 gives it back now; > 0 leaves it (still ours) to
--          end after that many ms (`at_least`); -1: given back already,
--          by a native `HDEL` of the caller's field (family_release.rs,
--          sent when the caller's lease is valid and the line key exists):
--          only name the first in line if it may go now
-- ARGV[4]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[5]  the release channel (same hash tag)
-- ARGV[6]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Compact form, one server only (not Cluster): KEYS[1] and ARGV[1..4]
-- alone; the line, the places and the channel are named from KEYS[1]
-- (`…:lock` → `…:line`, `…:places`, `…:released`), announced with PUBLISH.
--
-- Nobody else holds it and nobody waits (after the HDEL neither KEYS[1]
-- nor the line exists): TIME, HGET, HDEL and EXISTS, nothing more.
--
-- Returns next  (a string) released, and next (first in line) may go now:
--               it was told `next:<token>`
--         1     released (nobody in line may go yet, or a keep; with keep
--               -1: nobody in line may go yet)
--         0     not ours (expired, or another owner's)
--         -1    wrong type

local token, kind = ARGV[1], ARGV[2]
local base = string.sub(KEYS[1], 1, -6)
local line_key = KEYS[2] or base .. ':line'
local now = clock_ms()
local keep = tonumber(ARGV[3])
if keep >= 0 then
  local mine = typed('HGET', KEYS[1], token)
  if type(mine) == 'table' then
    return -1
  end
  local k, untl, fence = string.match(mine or '', '^(%a)(%d+):(%d+)$')
  if not k or tonumber(untl) <= now then
    return 0
  end
  if keep > 0 then
    redis.call('HSET', KEYS[1], token, k .. (now + keep) .. ':' .. fence)
    outlive(KEYS[1], now, now + keep)
    return 1
  end
  redis.call('HDEL', KEYS[1], token)
  -- Nobody else holds it (an emptied hash is no key) and nobody waits: done.
  if redis.call('EXISTS', KEYS[1], line_key) == 0 then
    return 1
  end
end
local holders = live_holders(KEYS[1], kind, now)
if not holders then
  return -1
end
if #holders == 0 then
  redis.call('DEL', KEYS[1])
end
-- Named only now: building a name costs the server time on every call.
local places_key = KEYS[3] or base .. ':places'
local line = live_line(line_key, places_key, kind, now)
local next = line and line[1]
if next and may_go(next[2], 1, holders, line, tonumber(ARGV[4])) then
  redis.call(ARGV[6] or 'PUBLISH', ARGV[5] or base .. ':released', 'next:' .. next[1])
  return next[1]
end
return 1
