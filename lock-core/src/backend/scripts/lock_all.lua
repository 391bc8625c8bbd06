-- Take several plain locks at once, or none: each must be free and have
-- nobody waiting in its line before the caller. Every lock is written
-- exactly as acquire.lua writes it (owner token with a PX expiry, fence
-- raised to max(last + 1, server clock in µs), the line markers), so that
-- plain acquisitions and releases of these keys see an ordinary lock.
--
-- KEYS[4i-3..4i]  for the i-th key (sorted): its lock key, fence key, line
--                 and places (see acquire.lua)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the lease length in ms
-- ARGV[3]  how long a fence key outlives an acquisition, in ms
-- ARGV[4]  0: one try; > 0: wait in line (in every key's line), keeping
--          the places this many ms longer than the caller will sleep
-- ARGV[5]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[5 + i]  the i-th key's release channel
-- ARGV[6 + n]  (optional, in line) the place life in ms: the places lapse
--          that soon unless their client keeps them (keep_place.lua)
--
-- Compact form, one server only (not Cluster): KEYS[i] the i-th lock key
-- alone, ARGV[1..4] as above, ARGV[5] the place life (in line; '' for
-- none), ARGV[6] (optional) the mode, below ('' for none), and ARGV[7]
-- (optional, in line) this attempt's name (when its client sent it, in µs
-- since its waiter started: see the record below); the
-- fence key, line, places and channel are named from the lock key
-- (`…:lock` → `…:fence`, `…:line`, `…:places`, `…:released`) and releases
-- are announced with PUBLISH. (The full form is told by its ARGV[5], a
-- publish command.) Each argument Redis passes to a script costs it about
-- 1k instructions: the compact form passes at most 6 + n instead of
-- 10 + 5n.
--
-- Modes (compact form only), after the native free case (lock_all_fast.rs,
-- a MULTI of one `SET … NX PX … GET` per key and reads) may have taken
-- keys without looking at their lines:
--   '1' claimed: every key holding the caller's token (marked or not) is
--       taken back first (deleted), and the call decides as if it had not
--       been there;
--   '2' resent: the same after a lost reply, except that a key is kept
--       (the first attempt's grant, which the caller must be told of) when
--       nobody stands first in its line, or the first in line is a plain
--       waiter that joined (its '~' field's fifth part) no earlier than
--       the key was set (its lease less its PTTL ago), as acquire.lua's
--       resent mode judges.
-- In either mode a key holding the caller's token whose grant record (its
-- places' '~' field) says 'granted' was handed to the caller by a release
-- (below), not taken by the native step: it is kept, as a retried call
-- keeps it. In either mode a grant writes a fresh fencing token for every
-- key, the caller's own included (the native grant wrote none), and a
-- call that does not grant tells the first in line of every key it took
-- back (`next:`), as it does for a key it gives back.
--
-- Free case first, before the helpers are defined (SOURCE places them
-- after it; defining a function costs every call that runs past it): when
-- every lock key and every line is absent and no fence key carries the
-- line marker, every key is taken at once, as the rest would take it
-- (fence raised above the last and at least the server clock in µs).
-- Anything else (a holder, a line, another type, a marker, the caller's
-- own key after a lost reply) goes on in lock_all_busy.lua.
--
-- First come, first served across all the keys: a waiting caller keeps a
-- place in the line of every one of its keys, all taken in this one call
-- (so at one instant), and renewed together. A key is granted only to the
-- first in its line (acquire.lua, and this script for each key), so a
-- later arrival, plain lock or lock_all, never overtakes the caller on any
-- of its keys. The caller keeps its turn on a key whose line it leads while
-- another of its keys is busy (the key stays free but kept for it: the
-- cost of first come first served, as for a writer that waits before
-- readers).
--
-- No deadlock among callers that hold nothing while they wait: lines only
-- grow at the back, and a lock_all's places all join their lines in one
-- call, so any two waiters that share lines stand in the same order in
-- every one of them (the one that came first is before the other). A
-- waiter only waits for holders (whose leases end) and for waiters before
-- it in its lines, which came earlier: the earliest waiter waits for
-- holders alone, and is served when they are gone. A caller whose place
-- lapsed in some line (it came back late, or the place was dropped) leaves
-- every line and joins them all again at the back, so its places keep one
-- arrival. (The sorted order of the keys makes the calls the same for every
-- caller; it is not what prevents the deadlock, the single call is.)
--
-- Places are written in the plain format (until when, in server ms).
-- Named (ARGV[7], compact form, at most 16 keys), each place gets a record
-- beside it, '~' .. token -> '<lease ms>:<ARGV[3]>:<server ms of this
-- attempt>:<ARGV[7]>@' then '<length>:<lock key>' for every key: a release
-- of any of the keys hands the caller every key at once when each is free
-- and the caller leads each line (release_lined.lua), in the release's own
-- round trip, published as a plain handoff is (`grant:…`, one fencing
-- token for every key). The lease is at most the place life, as for a
-- plain waiter. A lock_all waiter is never handed a single key; without a
-- record (Cluster, or more keys) it is told `next:` and looks itself.
--
-- Returns {fence1, ..., fencen}  (strings) all taken, or already ours
--         ms        (an integer) not now; look again within ms (-1: no
--                   expiry known)
--         {-1, j}   KEYS[j] holds a value of another type; nothing changed

local token = ARGV[1]
local compact = ARGV[5] ~= 'PUBLISH' and ARGV[5] ~= 'SPUBLISH'
local n = compact and #KEYS or #KEYS / 4
local grace = tonumber(ARGV[4])
local mode = compact and ARGV[6]
local claimed = mode == '1' or mode == '2'

-- Claimed or resent mode: the caller's keys taken back (see above).
local taken_back = {}
if claimed then
  local now
  for i = 1, n do
    local mine = redis.pcall('GET', KEYS[i])
    if type(mine) == 'string' and string.byte(mine, 1) == 43 then
      mine = string.sub(mine, 2)
    end
    if mine == token then
      local base = string.sub(KEYS[i], 1, -6)
      -- Handed over by a release: the caller's (see above).
      local resumed = redis.pcall('HGET', base .. ':places', '~' .. token) == 'granted'
      if not resumed and mode == '2' then
        local first = redis.pcall('LINDEX', base .. ':line', '0')
        if not first or first == token then
          resumed = true
        elseif type(first) == 'string' then
          local field = redis.pcall('HGET', base .. ':places', '~' .. first)
          local joined
          if type(field) == 'string' then
            joined = tonumber(string.match(field, '^%d+:%d+:%d+:%d+:(%d+)$') or '')
          end
          local left = redis.call('PTTL', KEYS[i])
          if joined and left > 0 then
            if not now then
              local t = redis.call('TIME')
              now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            end
            resumed = joined >= now - (tonumber(ARGV[2]) - left)
          end
        end
      end
      if not resumed then
        redis.call('DEL', KEYS[i])
        taken_back[i] = true
      end
    end
  end
end

-- The free case: one EXISTS of every lock key and line, one MGET of every
-- fence key, one TIME, then each key's fence and lock written.
local present, fence_keys = {}, {}
for i = 1, n do
  if compact then
    local base = string.sub(KEYS[i], 1, -6)
    present[2 * i - 1], present[2 * i], fence_keys[i] = KEYS[i], base .. ':line', base .. ':fence'
  else
    present[2 * i - 1], present[2 * i], fence_keys[i] = KEYS[4 * i - 3], KEYS[4 * i - 1], KEYS[4 * i - 2]
  end
end
if redis.call('EXISTS', unpack(present)) == 0 then
  -- (MGET reads a key of another type as nil: each value is checked.)
  local lasts = redis.call('MGET', unpack(fence_keys))
  local free = true
  for i = 1, n do
    local last = lasts[i]
    if last and not string.find(last, '^%d+$') then
      free = false
      break
    end
  end
  if free then
    local clock = redis.call('TIME')
    local floor = clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2]
    local fences = {}
    for i = 1, n do
      local fence = floor
      local last = lasts[i]
      if last and tonumber(last) >= tonumber(floor) then
        fence = string.format('%d', tonumber(last) + 1)
      end
      redis.call('SET', fence_keys[i], fence, 'PX', ARGV[3])
      redis.call('SET', present[2 * i - 1], token, 'PX', ARGV[2])
      fences[i] = fence
    end
    return fences
  end
end

-- Every key's names, for the rest.
local K, channels = {}, {}
for i = 1, n do
  if compact then
    local base = string.sub(KEYS[i], 1, -6)
    K[4 * i - 3], K[4 * i - 2], K[4 * i - 1], K[4 * i] = KEYS[i], base .. ':fence', base .. ':line', base .. ':places'
    channels[i] = base .. ':released'
  else
    K[4 * i - 3], K[4 * i - 2], K[4 * i - 1], K[4 * i] = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
    channels[i] = ARGV[5 + i]
  end
end
local publish = compact and 'PUBLISH' or ARGV[5]
local life = tonumber((compact and ARGV[5] or ARGV[6 + n]) or '')
-- The attempt's name (compact form): a busy reply writes the records.
local named = compact and n <= 16 and ARGV[7] ~= '' and ARGV[7]
