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
--          attempt>:<ARGV[9]>' (with ARGV[9] only):
--          what release.lua needs to hand the lock straight to this waiter
--          (a place without it, as `lock_all` writes, is only woken); after
--          such a handoff, 'granted' (the grant record, see below)
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
-- ARGV[7]  (claimed mode) the lock's release channel
-- ARGV[8]  (claimed mode) the publish command: PUBLISH or SPUBLISH
-- ARGV[9]  (optional, in line) this attempt's name: when its client sent
--          it, in µs since its waiter started. With it, a busy reply
--          writes the place's '~' field (see KEYS[4]), so that a release
--          may hand the lock to this waiter; without it (a `lock_all` on
--          Cluster), the place is only woken
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
--         {-1, i}   KEYS[i] holds a value of another type; nothing was changed
-- (Plain values, not a table, on the common paths: Redis converts a table
-- reply field by field, which showed in its CPU time.)

local token = ARGV[1]

local clock
local function now_ms()
  if not clock then
    clock = redis.call('TIME')
  end
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- The first in line whose place is still kept (the caller's own place
-- counts as kept: it is here), or false. Places not renewed in time belong
-- to waiters that crashed or left: they are dropped on the way. A line or
-- places key of another type: the {-1, i} reply.
local function first_in_line()
  local head = typed('LINDEX', KEYS[3], '0')
  while type(head) == 'string' and head ~= token do
    local kept = typed('HGET', KEYS[4], head)
    if type(kept) == 'table' then
      return {-1, 4}
    end
    if (tonumber(kept) or 0) > now_ms() then
      return head
    end
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], head, '~' .. head)
    head = redis.call('LINDEX', KEYS[3], '0')
  end
  if type(head) == 'table' then
    return {-1, 3}
  end
  return head or false
end

-- The fence key's value written with the marker, living at least as long
-- as the line.
local function mark_fence(value)
  local life = math.max(tonumber(ARGV[3]), redis.call('PTTL', KEYS[3]))
  redis.call('SET', KEYS[2], '+' .. value, 'PX', life)
end

local head -- the first in line; nil until looked at

-- Claimed mode: the caller's fast SET is taken back, to be decided again.
local seen = false -- a waiter marked the caller's key: it sleeps on its lease
if ARGV[6] == '1' then
  local mine, marked = unmarked(redis.pcall('GET', KEYS[1]))
  if mine == token and redis.pcall('HGET', KEYS[4], '~' .. token) ~= 'granted' then
    redis.call('DEL', KEYS[1])
    seen = marked
  end
end

-- The first in line, looked at once per call.
local function line_head()
  if head == nil then
    head = first_in_line()
  end
  return head
end

-- Free: ours for now (SET NX does not fail on a key of another type, it
-- just finds the key taken: no `typed` needed).
if redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
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
  local floor
  if ARGV[5] == '0' then
    clock = redis.call('TIME')
    floor = clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2]
  else
    floor = ARGV[5]
  end
  -- Write the floor and read the last token in one command (SET .. GET
  -- leaves a key of another type alone and answers WRONGTYPE).
  local old = typed('SET', KEYS[2], floor, 'PX', ARGV[3], 'GET')
  local last, lined = unmarked(old)
  if type(old) == 'table' or (last and not tonumber(last)) then
    -- The counter is not a number: undo our own writes (the foreign
    -- value goes back, without an expiry), change nothing else.
    redis.call('DEL', KEYS[1])
    if type(old) == 'string' then
      redis.call('SET', KEYS[2], old)
    end
    return {-1, 2}
  end
  local fence = floor
  local prior = tonumber(last)
  if prior and prior >= tonumber(floor) then
    -- A clock that stepped back, or Redlock's counters ahead.
    fence = string.format('%d', prior + 1)
  end
  if not lined then
    if fence ~= floor then
      redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
    end
    return fence
  end
  -- Someone may wait in line: the lock is ours only if nobody waits
  -- before us.
  if line_head() and head ~= token then
    -- Undo our writes (the counter goes back as it was).
    redis.call('DEL', KEYS[1])
    mark_fence(last)
    if type(head) == 'table' then
      return head
    end
    if seen then
      -- 'again:', not 'next:': the head was most likely told it is next
      -- by the release just before, and a client takes the same
      -- announcement twice for one heard twice (directly, then by pub/sub).
      redis.call(ARGV[8], ARGV[7], 'again:' .. head)
    end
  else
    if head then
      redis.call('LPOP', KEYS[3])
      redis.call('HDEL', KEYS[4], token, '~' .. token)
    end
    if redis.call('LINDEX', KEYS[3], '0') then
      mark_fence(fence)
      redis.call('SET', KEYS[1], '+' .. token, 'PX', ARGV[2])
    elseif fence ~= floor then
      redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
    end
    return fence
  end
end

-- Ours already: an earlier attempt got through but its reply was lost (a
-- retried call). Same lease, same fence: nobody else can have taken it in
-- between.
local holder = typed('GET', KEYS[1])
if type(holder) == 'table' then
  if type(line_head()) == 'table' then
    return head
  end
  if not head or head == token then
    return {-1, 1}
  end
  -- Behind someone in line, the lock key's type does not matter yet.
  holder = false
end
local holder_marked
holder, holder_marked = unmarked(holder)
if holder == token then
  -- (Or handed to us by a release: its grant record goes.)
  redis.call('HDEL', KEYS[4], '~' .. token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = typed('GET', KEYS[2])
  if type(fence) == 'table' then
    return {-1, 2}
  end
  return unmarked(fence) or '0'
end

local sleep = redis.call('PTTL', KEYS[1])
if sleep < 0 then
  -- Free (kept for the first in line, see above), or without expiry.
  if type(line_head()) == 'table' then
    return head
  end
  if head and head ~= token then
    -- Kept for the first in line until its place lapses.
    sleep = tonumber(redis.call('HGET', KEYS[4], head)) - now_ms()
  end
end

-- Not now: keep (or take) the caller's place in line while it sleeps, and
-- keep the line markers (see the top) in place.
local grace = tonumber(ARGV[4])
if grace > 0 then
  local counter = typed('GET', KEYS[2])
  local value, counter_marked = unmarked(counter)
  if type(counter) == 'table' or (value and not tonumber(value)) then
    return {-1, 2}
  end
  local keep = math.max(sleep, 0) + grace
  if redis.call('HSET', KEYS[4], token, now_ms() + keep) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  if ARGV[9] then
    redis.call('HSET', KEYS[4], '~' .. token, ARGV[2] .. ':' .. ARGV[3] .. ':' .. now_ms() .. ':' .. ARGV[9])
  end
  if redis.call('PTTL', KEYS[3]) < keep then
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
  local life = redis.call('PTTL', KEYS[2])
  if not counter_marked or (life >= 0 and life < keep) then
    if life == -1 then
      redis.call('SET', KEYS[2], '+' .. (value or '0'), 'KEEPTTL')
    else
      redis.call('SET', KEYS[2], '+' .. (value or '0'), 'PX', math.max(life, keep))
    end
  end
  -- Only a leasehold token gets the marker: a foreign value stays as it is.
  if holder and not holder_marked and string.find(holder, '^' .. string.rep('%x', 32) .. ':') then
    redis.call('SET', KEYS[1], '+' .. holder, 'KEEPTTL')
  end
end
return sleep
