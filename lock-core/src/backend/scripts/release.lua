-- Give a lock back, only if it is still ours, and tell who is next.
--
-- KEYS[1]  the lock key (string: owner token; '+' in front of it when
--          someone may wait in line, see acquire.lua)
-- KEYS[2]  the line of waiting tokens (list, first come first served)
-- KEYS[3]  the waiters' places (hash: token -> until when, in server ms;
--          '~' .. token -> '<lease ms>:<fence life ms>:<server ms>:<attempt>'
--          (then ':<server ms it joined the line>', read by acquire.lua)
--          for a waiter of a plain lock (acquire.lua): the lease it asked
--          for, when its last attempt ran and that attempt's name; only such
--          a place may be handed the lock. A `lock_all` waiter's (compact
--          form, lock_all.lua) is the same four parts, then '@' and
--          '<length>:<lock key>' for every key of its call: it is handed
--          every key at once or none (release_lined.lua). Family places, and
--          `lock_all` places on Cluster, have no such field)
-- KEYS[4]  the fence key (see acquire.lua)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  keep, in milliseconds: 0 deletes the key now and announces the
--          release; > 0 leaves the (still owned) key to expire after that many
--          ms (`at_least`: a skip-if-locked job must not run again too soon),
--          and announces the new expiry so that waiters look again and sleep
--          until then instead of until the old one
-- ARGV[3]  the release channel of this lock (same hash tag as KEYS[1])
-- ARGV[4]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[5]  1: announce every release; 0: only when someone waits in line
--          (every waiter of a single server or Cluster keeps a place in
--          line; Redlock keeps none, so its waiters need every release)
-- Shortest form, the most common case: KEYS[1] and ARGV[1] alone, that is
-- the compact form below with keep 0 (ARGV[2] absent), announced only to
-- the line. Each argument Redis passes to a script costs it about 1k
-- instructions, and each test of one a few hundred (callgrind, Redis 7.0),
-- so an owned lock that nobody waits for is deleted after a single test.
-- Compact form, one server only (not Cluster): KEYS[1] and
-- ARGV[1..2] alone; the line, places, fence and channel are then named from
-- the lock key (`…:lock` → `…:line`, `…:places`, `…:fence`, `…:released`),
-- announced with PUBLISH, only to
-- the line (ARGV[5] = 0), or, with ARGV[3] = '1' (a Redlock master), every
-- release (ARGV[5] = 1). Fewer arguments are cheaper for Redis to pass to
-- a script (measured: about 2 µs of a 13 µs release on Redis 7.0).
-- KEYS[5], ARGV[6], ARGV[7]  only shortly after the server restarted or
--          failed over (as the caller's client saw it), for a lease granted
--          before that change: the survival mark, how many ms it is kept,
--          and its value, the tag of the server's run_id as the caller knows
--          it. The lease was held across the change, so the key's state
--          survived it: clients that closed the key after the change
--          (gate.rs) find the mark naming the server as it is now and grant
--          it again; a mark restored from a snapshot, or left after an
--          earlier change, names another run_id and opens nothing.
--
-- Handoff (SPEC semantic 3): a plain release (keep 0, announced to the line:
-- not Redlock) whose first kept place carries a lease length grants the
-- lock to that waiter in the same step: the lock key holds its token with
-- its lease, the fence key a new fencing token (above the last one and at
-- least the server clock in µs, as acquire.lua issues them), its place
-- leaves the line and its '~' field becomes the grant record 'granted' (its
-- next attempt, if it never hears of the grant, recognises the lock as its
-- own: acquire.lua). The message is then
-- `grant:<fence>:<ms since the waiter's last attempt ran>:<that attempt's
-- name>:<token>`: its client has the lock without another round trip,
-- valid from that attempt's sending plus those ms. Places that lapsed are dropped on the way.
-- A `lock_all` waiter first in line whose other key the caller still holds
-- (a `lock_all` giving its keys back one by one) is told nothing: that
-- key's release hands it every key (reply 1).
-- Otherwise the message is `next:<token>` naming the first in line, whose
-- client wakes just that waiter, or `free:<released token>` when nobody
-- waits in line.
-- Nobody in line and ARGV[5] = 0: no message (the common case costs no
-- PUBLISH).
-- (With a keep, the woken waiter finds the lock still taken and learns when
-- it ends.)
--
-- Nobody in line (no marker): two commands, GET and DEL. (A grant record
-- of the caller then stays until the places hash expires: nobody waits to
-- keep it alive.)
--
-- Returns grant  (a string, 'grant:…' as published) released and handed on
--         next   (a string) released, and next is the first in line
--         1      released (nobody in line, or a keep)
--         0      not ours (expired, or another owner's)
--         -1     wrong type
-- (Plain values, not a table: Redis converts a table reply field by field.)

local holder = redis.pcall('GET', KEYS[1])
-- Shortest form, ours, nobody in line: 18.0k instructions per call, against
-- 21.0k in the compact form (17.6k for a bare compare-and-delete).
if holder == ARGV[1] and not ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end

local compact = #KEYS == 1

-- The common case first, before the helpers (typed.lua, marker.lua) that
-- SOURCE places after it: defining a Lua function costs every call that
-- runs past it (measured with callgrind on Redis 7.0: 25.0k instructions
-- per owned release in the compact form with the helpers first, 20.8k
-- with them here; a plain compare-and-delete script, given two arguments,
-- 18.5k). Hence `typed` and `unmarked` are
-- written out here.
local lined = false
if holder ~= ARGV[1] then
  if type(holder) == 'table' then
    -- GET fails on another type only (-1); anything else is raised.
    if holder.err and not string.find(holder.err, 'WRONGTYPE', 1, true) then
      error(holder.err .. ' (command GET)')
    end
    return -1
  end
  if type(holder) ~= 'string' or string.byte(holder, 1) ~= 43
      or string.sub(holder, 2) ~= ARGV[1] then
    return 0
  end
  -- '+' and our token: ours, someone may wait in line.
  lined = true
end

local keep = tonumber(ARGV[2] or '0')
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
else
  redis.call('DEL', KEYS[1])
end
if KEYS[5] then
  redis.call('SET', KEYS[5], ARGV[7] or '1', 'PX', ARGV[6])
end
-- Nobody in line and nobody to tell of every release (the common case):
-- done, before anything below is named or defined (each costs the server
-- time on every call).
if not lined and not (compact and ARGV[3] == '1') and (compact or ARGV[5] == '0') then
  return 1
end
-- Nobody in line, every release announced (a Redlock master): tell, done.
if not lined then
  if compact then
    redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', 'free:' .. ARGV[1])
  else
    redis.call(ARGV[4], ARGV[3], 'free:' .. ARGV[1])
  end
  return 1
end

