-- Take a permit of a semaphore, or a side of a read-write lock, if it may
-- be granted now without passing over anyone in line (family.lua says
-- when); else keep (or take) the caller's place in line.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the fence key: the last fencing token issued above the server
--          clock (an integer; a token that is the clock is not written)
-- KEYS[3]  the line: a list of waiting owner tokens, first come first served
-- KEYS[4]  the places: a hash, waiting token -> <kind><until>
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the caller's kind: s (permit), r (read share), w (writer)
-- ARGV[3]  the lease length in ms
-- ARGV[4]  how long the fence key outlives a grant, in ms
-- ARGV[5]  0: one try; > 0: wait in line, keeping the place this many ms
--          longer than the caller will sleep
-- ARGV[6]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[7]  the release channel (same hash tag)
-- ARGV[8]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[9]  (optional, in line) the place life in ms: the place lapses that
--          soon unless its client keeps it (keep_place.lua); ARGV[7] and
--          ARGV[8] are then sent in the compact form too, as ''
-- ARGV[10] (optional, after ARGV[9]) this attempt's name: when its client
--          sent it, in µs since its waiter started. With it, a busy reply
--          writes the place's '~' field (family.lua), so that a release
--          may hand this waiter its grant (family_release.lua); without
--          it, the place is only woken (`next:<token>`)
-- ARGV[11] (optional, after ARGV[10]) the name of the caller's client's
--          wake-ups (hex digits), written as the '~' field's fifth part: a
--          release sent by that client hands this waiter its grant through
--          its own reply, without PUBLISH (family_hand_on.lua)
--
-- Compact form, one server only (not Cluster), the common case: KEYS[1]
-- and ARGV[1..6] alone; the fence key, the line, the places and the
-- channel are then named from KEYS[1] (`…:lock` → `…:fence`, `…:line`,
-- `…:places`, `…:released`), announced with PUBLISH. Each key or argument
-- passed costs Redis CPU on every call (see release.lua).
--
-- Free (neither KEYS[1] nor the line nor the fence key exists), the whole
-- call is TIME, EXISTS, HSET and PEXPIRE: no line read, no fence written.
--
-- Returns fence    (a string) granted, or already ours (a retried call)
--         ms       (an integer) not now: look again within ms (-1: nothing
--                  known ends sooner)
--         {-1, i}  KEYS[i] holds another type, or the key is used by
--                  another primitive; nothing was changed

local token, kind = ARGV[1], ARGV[2]
local base = string.sub(KEYS[1], 1, -6)
local fence_key = KEYS[2] or base .. ':fence'
local line_key = KEYS[3] or base .. ':line'
local time = redis.call('TIME')
-- The server clock in µs, as a decimal string: a grant's fencing token
-- unless something issued earlier is as high.
local clock = time[1] .. string.rep('0', 6 - #time[2]) .. time[2]

-- Free: no holders, nobody in line and no fence key (none of the three
-- exists, whatever its type: a key of another type takes the full way
-- below, which reports it). Nothing to drop, nobody to pass over or to
-- tell, nothing issued above the clock: take it, the clock is the token.
-- (A fence key is written only for a raised token, so it is seldom there;
-- with one, the full way grants the same.)
--
-- The free case first, before the helpers (typed.lua, family.lua) that
-- SOURCE places after it: defining a Lua function costs every call that
-- runs past it (see release.lua).
--
-- Only what the free case needs is parsed before it: every `tonumber`
-- costs Redis about 1k instructions. The lease's end in ms is the clock's
-- µs / 1000 (exact: below 2^53, and IEEE division rounds correctly), and
-- PEXPIRE takes the lease length as it was sent.
if redis.call('EXISTS', KEYS[1], line_key, fence_key) == 0 then
  local ends = math.floor(tonumber(clock) / 1000) + ARGV[3]
  redis.call('HSET', KEYS[1], token, kind .. ends .. ':' .. clock)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return clock
end
local ttl = tonumber(ARGV[3])
local permits = tonumber(ARGV[6])
-- The clock in ms, as a decimal string (lease ends are compared as
-- strings, family.lua's `above`) and as a number.
local now_ms = string.sub(clock, 1, -4)
local now = tonumber(now_ms)
