-- Give up an acquisition of a permit or rw-lock side: give back what an
-- attempt whose reply never came may have got, and leave the line; if that
-- lets the first in line go, tell it.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list)
-- KEYS[3]  the waiters' places (hash: token -> <kind><until>)
-- ARGV[1]  the abandoning owner token
-- ARGV[2]  its kind: s, r or w
-- ARGV[3]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[4]  the release channel (same hash tag)
-- ARGV[5]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns 1 it held one (now given back), 0 it did not

local token, kind = ARGV[1], ARGV[2]
local now = clock_ms()
local held = typed('HDEL', KEYS[1], token)
if type(held) ~= 'number' then
  held = 0
end
local placed = typed('HDEL', KEYS[3], token)
if type(placed) == 'number' then
  redis.call('HDEL', KEYS[3], '~' .. token)
end
if type(placed) ~= 'number' then
  placed = 0
end
if placed == 1 then
  redis.call('LREM', KEYS[2], 1, token)
end
if held == 0 and placed == 0 then
  return 0
end
local holders = live_holders(KEYS[1], kind, now)
if not holders then
  return held
end
if #holders == 0 then
  redis.call('DEL', KEYS[1])
end
local line = live_line(KEYS[2], KEYS[3], kind, now)
local next = line and line[1]
if next and may_go(next[2], 1, holders, line, tonumber(ARGV[3])) then
  redis.call(ARGV[5], ARGV[4], 'next:' .. next[1])
end
return held
