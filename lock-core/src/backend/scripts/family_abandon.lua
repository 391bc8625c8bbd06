-- Give up an acquisition of a permit or rw-lock side: give back what an
-- attempt whose reply never came may have got, and leave the line; if that
-- lets some in line go now, hand it on to them at once, as a release does
-- (family_hand_on.lua, concatenated after this).
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list)
-- KEYS[3]  the waiters' places (hash: token -> <kind><until>, and
--          '~' .. token -> what a grant needs, see family.lua)
-- KEYS[4]  the fence key (see family_acquire.lua)
-- ARGV[1]  the abandoning owner token
-- ARGV[2]  its kind: s, r or w
-- ARGV[3]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[4]  the release channel (same hash tag)
-- ARGV[5]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns 1 or 0              it held one (now given back), or not; nobody
--                             in line was told
--         {1 or 0, msg…}      the same, and each message (as published)
--                             told a waiter that may go now: its grant, or
--                             `next:` for the last

local token, kind = ARGV[1], ARGV[2]
local now, now_ms, clock = clock_ms()
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
  redis.call('LREM', KEYS[2], '1', token)
end
if held == 0 and placed == 0 then
  return 0
end
local holders = live_holders(KEYS[1], kind, now_ms)
if not holders then
  return held
end
if #holders == 0 then
  redis.call('DEL', KEYS[1])
end
local base = string.sub(KEYS[1], 1, -6)
local line_key, places_key, fence_named = KEYS[2], KEYS[3], KEYS[4]
local permits = tonumber(ARGV[3])
local channel, publish = ARGV[4], ARGV[5]
-- Every grant is published (no caller's name: family_hand_on.lua).
local here
local function finish(told)
  if #told == 0 then
    return held
  end
  table.insert(told, 1, held)
  return told
end
