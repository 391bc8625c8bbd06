-- Take a lock if it is free and nobody is waiting in line before us (one
-- atomic step: no GET-then-SET race, no barging past earlier waiters).
--
-- KEYS[1]  the lock key: a string holding the owner token, with a PX expiry (the lease)
-- KEYS[2]  the fence key: the last fencing token issued (an integer), raised
--          once per acquisition, forgotten ARGV[3] ms after the last one
-- KEYS[3]  the line: a list of waiting owner tokens, first come first served
-- KEYS[4]  the places: a hash, waiting token -> until when (server ms) its
--          place is kept; a waiter renews it each time it tries. Beside it,
--          '~' .. token -> '<ARGV[2]>:<ARGV[3]>:<server ms of this
--          attempt>:<ARGV[9]>:<server ms it joined the line>' (with
--          ARGV[9] only): what release.lua needs to hand the lock straight
--          to this waiter (a place without it, as `lock_all` writes, is
--          only woken), and when it stood in line (resent mode, below);
--          after such a handoff, 'granted' (the grant record, see below)
-- ARGV[1]  the caller's owner token (32 hex characters, 128 random bits,
--          then ':' and the client's name)
-- ARGV[2]  the lease length in milliseconds
-- ARGV[3]  how long the fence key outlives an acquisition, in milliseconds
-- ARGV[4]  0: one try, do not wait in line; > 0: wait in line, and keep the
--          place this many ms longer than the caller will sleep
-- ARGV[5]  the floor of a new fencing token: 0 for the server clock in µs;
--          otherwise this number (Redlock sends its client's clock, the same
--          to every node, so that nodes in step issue the same token)
-- ARGV[6]  (optional) '1': claimed mode, after the fast acquisition
--          (fast.rs) may have taken the lock with a plain SET NX and found
--          the line marker (or anything it does not decide). The caller's
--          own key is taken back first, and the call decides as if it had
--          not been there: ours if nobody waits before us, else the first
--          in line's (if a waiter saw our key, marked it and sleeps until
--          its lease ends, `again:<first in line>` through ARGV[8] on
--          ARGV[7] wakes the first in line). A key holding the caller's
--          token while its grant record (KEYS[4]) says 'granted' was
--          handed to it by a release, not taken by a fast SET: it is kept,
--          and recognised as the caller's below.
--          '2': resent mode, the same after a lost reply (see below)
-- ARGV[7]  (claimed mode) the lock's release channel
-- ARGV[8]  (claimed mode) the publish command: PUBLISH or SPUBLISH
-- ARGV[9]  (optional, in line) this attempt's name: when its client sent
--          it, in µs since its waiter started. With it, a busy reply
--          writes the place's '~' field (see KEYS[4]), so that a release
--          may hand the lock to this waiter; without it (a `lock_all` on
--          Cluster), the place is only woken; '' stands for none when
--          ARGV[10] follows
-- ARGV[10] (optional, in line) the place life in ms: the place lapses that
--          soon unless its client keeps it (keep_place.lua), and a release
--          hands this waiter a lease of at most that long (its client
--          extends it on hearing of the grant), so that a waiter that died
--          or froze holds the line up for at most about that long, whatever
--          the lease. Without it, a place is kept for the sleep plus ARGV[4]
--
-- The line marker (marker.lua): a '+' in front of the fence key's value
-- (and of the lock key's token) says that someone may wait in line. A free
-- lock whose fence key has no marker is taken without looking at the line:
-- that is the common case, and it costs three commands (SET NX, TIME,
-- SET .. GET).
--  * Whenever the line is not empty, the fence key exists, carries the
--    marker and lives at least as long as the line (a waiter sees to it
--    each time it takes or keeps its place).
--  * Whenever the line is not empty and the lock is held, the lock key's
--    token carries the marker too, so release.lua looks at the line (and
--    wakes the next) only then.
-- A marker may outlive the line (a waiter left): the next acquisition looks
-- at the line once and writes the fence without it.
--
-- Returns fence     (a string: the fencing token, in decimal) acquired, or
--                   already ours (a retried call after a lost reply)
--         ms        (an integer) not now; look again within ms (-1: no expiry
--                   known): the lock is held, or kept for the first in line
--         {-1, i}   KEYS[i] holds a value of another type, or (i = 1) the key
--                   is a semaphore's or rw lock's, someone of which waits in
--                   its line (a place `<kind><until>`, family.lua); nothing
--                   was changed
-- (Plain values, not a table, on the common paths: Redis converts a table
-- reply field by field, which showed in its CPU time.)

local token = ARGV[1]

-- The free lock comes first, before the helpers (typed.lua, marker.lua)
-- and the functions that SOURCE places after it: defining a Lua function
-- costs every call that runs past it (the same measure as release.lua's:
-- callgrind on Redis 7.0). So `typed` and `unmarked` are written out here.

local clock

-- Claimed mode: the caller's fast SET is taken back, to be decided again.
-- Resent mode (ARGV[6] = '2'): the call is sent again after the reply to
-- an attempt (fast or claimed) was lost; the caller's key may be that
-- attempt's grant, which the caller must be told of (a resend reports what
-- its first attempt did). It was one unless someone stood in line before
-- it was set: the first in line joined the line (its '~' field names
-- when) no earlier than the key was set (its lease less its PTTL ago), or
-- nobody waits. (When the first in line last looked says nothing of it: a
-- waiter that sleeps keeps its place without looking, and one that stood
-- in line before a newcomer's SET looks again after it.)
local seen = false -- a waiter marked the caller's key: it sleeps on its lease
local resumed = false -- the caller's key was its first attempt's grant
if ARGV[6] == '1' or ARGV[6] == '2' then
  local mine = redis.pcall('GET', KEYS[1])
  local marked = type(mine) == 'string' and string.byte(mine, 1) == 43
  if marked then
    mine = string.sub(mine, 2)
  end
  if mine == token and redis.pcall('HGET', KEYS[4], '~' .. token) ~= 'granted' then
    if ARGV[6] == '2' then
      local first = redis.pcall('LINDEX', KEYS[3], '0')
      if not first or first == token then
        resumed = true
      elseif type(first) == 'string' then
        local field = redis.pcall('HGET', KEYS[4], '~' .. first)
        local joined
        if type(field) == 'string' then
          local look, was = string.match(field, '^%d+:%d+:(%d+):%d+:?(%d*)$')
          -- (A field without the fifth part, from an older client: its
          -- last look.)
          joined = tonumber(was or '') or tonumber(look or '')
        end
        local left = redis.call('PTTL', KEYS[1])
        if joined and left > 0 then
          local t = redis.call('TIME')
          local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
          resumed = joined >= now - (tonumber(ARGV[2]) - left)
        end
      end
    end
    redis.call('DEL', KEYS[1])
    seen = marked and not resumed
  end
end

-- Free: ours for now (SET NX does not fail on a key of another type, it
-- just finds the key taken: no `typed` needed).
local taken = redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2])
local floor, last, lined, fence
if taken then
  -- The next token is one above the last and at least the server clock
  -- in microseconds. So it is above every token issued before even when
  -- the counter was lost or set back with the server's data (a restart
  -- without persistence, FLUSHDB, eviction, a failover to a replica that
  -- missed the last increments): a counter cannot outrun a microsecond
  -- clock (that would take over a million acquisitions per second of one
  -- lock), unless the clock stepped back. A counter unused for ARGV[3] ms
  -- is forgotten, so unused lock names leave nothing behind.
  -- The clock in µs is written from TIME's two parts as a string: no
  -- number formatting on the common path (it showed in Redis' profile).
  if ARGV[5] == '0' then
    clock = redis.call('TIME')
    floor = clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2]
  else
    floor = ARGV[5]
  end
  -- Write the floor and read the last token in one command (SET .. GET
  -- leaves a key of another type alone and answers WRONGTYPE; any other
  -- error is raised, as typed.lua does).
  local old = redis.pcall('SET', KEYS[2], floor, 'PX', ARGV[3], 'GET')
  last, lined = old, false
  if type(old) == 'table' then
    if old.err and not string.find(old.err, 'WRONGTYPE', 1, true)
        and not string.find(old.err, 'not an integer', 1, true) then
      error(old.err .. ' (command SET)')
    end
  elseif type(old) == 'string' and string.byte(old, 1) == 43 then
    last, lined = string.sub(old, 2), true
  end
  if type(old) == 'table' or (last and not tonumber(last)) then
    -- The counter is not a number: undo our own writes (the foreign
    -- value goes back, without an expiry), change nothing else.
    redis.call('DEL', KEYS[1])
    if type(old) == 'string' then
      redis.call('SET', KEYS[2], old)
    end
    return {-1, 2}
  end
  fence = floor
  local prior = tonumber(last)
  if prior and prior >= tonumber(floor) then
    -- A clock that stepped back, or Redlock's counters ahead.
    fence = string.format('%d', prior + 1)
  end
  -- A line without the marker is a semaphore's or rw lock's (they do not
  -- mark the fence key): the key is another primitive's while anyone
  -- waits in its line, decided below (acquire_contended.lua).
  if not lined and redis.call('EXISTS', KEYS[3]) == 0 then
    if fence ~= floor then
      redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
    end
    return fence
  end
end
