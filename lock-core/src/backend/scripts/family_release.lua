-- Give back a permit of a semaphore or a side of a read-write lock, only if
-- it is still ours, and hand it on at once to every waiter in line that
-- may go now, in turn (family.lua's `may_go`: the free permits; after a
-- writer, every reader up to the next writer).
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list, first come first served)
-- KEYS[3]  the waiters' places (hash: token -> <kind><until>, and
--          '~' .. token -> what a grant needs, see family.lua)
-- KEYS[4]  the fence key (see family_acquire.lua)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the caller's kind: s, r or w
-- ARGV[3]  keep, in ms: 0 gives it back now; > 0 leaves it (still ours) to
--          end after that many ms (`at_least`); -1: given back already,
--          by a native `HDEL` of the caller's field (family_release.rs,
--          sent when the caller's lease is valid and the line key exists):
--          only hand it on to those in line that may go now
-- ARGV[4]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[5]  the release channel (same hash tag)
-- ARGV[6]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[7]  (optional) the name of the caller's client's wake-ups: a grant
--          handed to a waiter whose place carries the same name (its '~'
--          field's fifth part) is not published, only returned: the
--          caller announces its reply to its own waiters
--
-- Compact form, one server only (not Cluster): KEYS[1] and ARGV[1..4]
-- alone, and ARGV[5] the optional name (ARGV[7] above); the line, the
-- places, the fence key and the channel are named from KEYS[1] (`…:lock`
-- → `…:line`, `…:places`, `…:fence`, `…:released`), announced with
-- PUBLISH.
--
-- Nobody else holds it and nobody waits (the caller was the hash's only
-- field, and the line does not exist): TIME, HGETALL, HDEL and EXISTS,
-- nothing more.
--
-- Handing on: each waiter that may go, first in line first, whose place
-- carries what a grant needs (its '~' field), becomes a holder here, with
-- a fresh fencing token (as family_acquire.lua issues them) and a lease
-- of at most the place life (its client's watchdog extends a longer one),
-- leaves the line, and is told
-- `grant:<fence>:<server ms since its last attempt>:<that attempt's
-- name>:<token>` (the plain lock's grant message, see wakeups.rs). A
-- waiter that may go but whose place carries no such field is told
-- `next:<token>` instead, and the handing on stops there (it looks
-- itself, and tells the next).
--
-- Returns {msg…} released, and each message told a waiter that may go
--               now (published, except a grant to a waiter of the
--               caller's own client, see ARGV[7]): its grant, or `next:`
--               for the last
--         1     released (nobody in line may go yet, or a keep; with keep
--               -1: nobody in line may go yet)
--         0     not ours (expired, or another owner's)
--         -1    wrong type

local token, kind = ARGV[1], ARGV[2]
local base = string.sub(KEYS[1], 1, -6)
local line_key = KEYS[2] or base .. ':line'
local now, now_ms, clock = clock_ms()
local keep = tonumber(ARGV[3])
-- The caller's own holder, from one HGETALL that the handing on reads
-- the others from too (a contended release reads the hash once).
local all
if keep >= 0 then
  all = typed('HGETALL', KEYS[1])
  if all.err then
    return -1
  end
  local mine
  for i = 1, #all, 2 do
    if all[i] == token then
      mine = all[i + 1]
      break
    end
  end
  local k, untl, fence = string.match(mine or '', '^(%a)(%d+):(%d+)$')
  if not k or not above(untl, now_ms) then
    return 0
  end
  if keep > 0 then
    redis.call('HSET', KEYS[1], token, k .. (now + keep) .. ':' .. fence)
    outlive(KEYS[1], now, now + keep)
    return 1
  end
  redis.call('HDEL', KEYS[1], token)
  -- Nobody else held it (the hash is gone with its last field) and nobody
  -- waits: done.
  if #all == 2 and redis.call('EXISTS', line_key) == 0 then
    return 1
  end
end
-- (Read here only in the wake mode, after a native HDEL. With no live
-- holder left, every field is gone, and the emptied hash with them.)
local holders = live_holders(KEYS[1], kind, now_ms, all, all and token)
if not holders then
  return -1
end
-- Named only now: building a name costs the server time on every call.
local places_key = KEYS[3] or base .. ':places'
local permits = tonumber(ARGV[4])
local channel = KEYS[2] and ARGV[5] or base .. ':released'
local publish = KEYS[2] and ARGV[6] or 'PUBLISH'
local fence_named = KEYS[4]
local here = ARGV[KEYS[2] and 7 or 5]
-- The reply once family_hand_on.lua has handed on (after this, in the
-- same script): the messages, or 1 when nobody in line may go yet.
local function finish(told)
  if #told > 0 then
    return told
  end
  return 1
end
