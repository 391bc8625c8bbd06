-- Give a lock back, only if it is still ours, and tell who is next.
--
-- KEYS[1]  the lock key (string: owner token; '+' in front of it when
--          someone may wait in line, see acquire.lua)
-- KEYS[2]  the line of waiting tokens (list, first come first served)
-- KEYS[3]  the waiters' places (hash: token -> until when, in server ms)
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
-- Compact form, one server only (not Cluster), the common case: KEYS[1] and
-- ARGV[1..2] alone; the line and the channel are then named from the lock
-- key (`…:lock` → `…:line`, `…:released`), announced with PUBLISH, only to
-- the line (ARGV[5] = 0), or, with ARGV[3] = '1' (a Redlock master), every
-- release (ARGV[5] = 1). Fewer arguments are cheaper for Redis to pass to
-- a script (measured: about 2 µs of a 13 µs release on Redis 7.0).
-- KEYS[4], ARGV[6]  only shortly after the server restarted or failed over
--          (as the caller's client saw it): the survival mark and how many
--          ms it is kept. A lease released here was held across the change,
--          so the key's state survived it: clients that closed the key
--          after the change (gate.rs) find the mark and grant it again.
--
-- The message is `next:<token>` naming the first in line, whose client wakes
-- just that waiter, or `free:<released token>` when nobody waits in line.
-- Nobody in line and ARGV[5] = 0: no message (the common case costs no
-- PUBLISH).
-- (With a keep, the woken waiter finds the lock still taken and learns when
-- it ends.)
--
-- Nobody in line (no marker): two commands, GET and DEL.
--
-- Returns next   (a string) released, and next is the first in line
--         1      released (nobody in line, or a keep)
--         0      not ours (expired, or another owner's)
--         -1     wrong type
-- (Plain values, not a table: Redis converts a table reply field by field.)

local compact = #KEYS == 1
-- The name of the lock's `suffix` key in the compact form.
local function sibling(suffix)
  return string.sub(KEYS[1], 1, -6) .. suffix
end

local holder, lined = unmarked(typed('GET', KEYS[1]))
if type(holder) == 'table' and holder.err then
  return -1
end
if holder ~= ARGV[1] then
  return 0
end

local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
else
  redis.call('DEL', KEYS[1])
end
if KEYS[4] then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[6])
end
local next = lined and typed('LINDEX', compact and sibling(':line') or KEYS[2], '0')
if type(next) ~= 'string' then
  if compact then
    if ARGV[3] == '1' then
      redis.call('PUBLISH', sibling(':released'), 'free:' .. ARGV[1])
    end
  elseif ARGV[5] == '1' then
    redis.call(ARGV[4], ARGV[3], 'free:' .. ARGV[1])
  end
  return 1
end
if compact then
  redis.call('PUBLISH', sibling(':released'), 'next:' .. next)
else
  redis.call(ARGV[4], ARGV[3], 'next:' .. next)
end
if keep > 0 then
  return 1
end
return next
