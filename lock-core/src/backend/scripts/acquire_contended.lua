-- The rest of acquire.lua (see its comment for KEYS, ARGV and replies),
-- run after typed.lua and marker.lua: reached when the lock was taken but
-- someone may wait in line, or when it was not free. Its locals `token`,
-- `clock`, `seen`, `resumed`, `taken`, `floor`, `last`, `lined` and
-- `fence` come from acquire.lua.

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
-- A semaphore's or rw lock's waiter found first in line (see below).
local family_head

local function first_in_line()
  local head = typed('LINDEX', KEYS[3], '0')
  while type(head) == 'string' and head ~= token do
    local kept = typed('HGET', KEYS[4], head)
    if type(kept) == 'table' then
      return {-1, 4}
    end
    if kept and string.find(kept, '^%a') then
      -- A semaphore's or rw lock's waiter (`<kind><until>`): the key is
      -- that primitive's while it waits (kinds never mix).
      family_head = head
      return {-1, 1}
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

-- The first in line, looked at once per call.
local function line_head()
  if head == nil then
    head = first_in_line()
  end
  return head
end

if taken then
  -- Someone may wait in line: the lock is ours only if nobody waits
  -- before us.
  if line_head() and head ~= token and (type(head) == 'table' or not resumed) then
    -- Undo our writes (the counter goes back as it was).
    redis.call('DEL', KEYS[1])
    if type(head) == 'table' then
      -- Nothing changed: the fence key as it was (marked or not).
      if lined then
        mark_fence(last)
      elseif last then
        redis.call('SET', KEYS[2], last, 'PX', ARGV[3])
      else
        redis.call('DEL', KEYS[2])
      end
      if family_head and ARGV[8] then
        -- Claimed mode: the fast SET may have been seen by that waiter,
        -- which then waits for it; it is gone now.
        redis.call(ARGV[8], ARGV[7], 'again:' .. family_head)
      end
      return head
    end
    mark_fence(last or '0')
    if seen then
      -- 'again:', not 'next:': the head was most likely told it is next
      -- by the release just before, and a client takes the same
      -- announcement twice for one heard twice (directly, then by pub/sub).
      redis.call(ARGV[8], ARGV[7], 'again:' .. head)
    end
  else
    -- (Resumed, another may be first: its place stays.)
    if head == token then
      -- Granted from the head of the line: its '~' field becomes the grant
      -- record, as a release's handoff leaves it, so that a resend of this
      -- attempt after a lost reply finds the key its own whoever waits
      -- behind it (resent mode above), and its next call consumes it.
      -- (Written while its place is there: the hash keeps its expiry.)
      redis.call('LPOP', KEYS[3])
      redis.call('HSET', KEYS[4], '~' .. token, 'granted')
      redis.call('HDEL', KEYS[4], token)
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
  -- With a place life (ARGV[10]), the place lapses that soon unless its
  -- client keeps it (keep_place.lua), and a release hands this waiter a
  -- lease of at most that long, which its client extends when it hears of
  -- the grant: a waiter that died costs the line at most the place life.
  local life = tonumber(ARGV[10] or '')
  local place = keep
  local lease = ARGV[2]
  if life then
    place = math.min(keep, life)
    if tonumber(lease) > life then
      lease = ARGV[10]
    end
  end
  local joined = now_ms()
  if redis.call('HSET', KEYS[4], token, now_ms() + place) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  elseif ARGV[9] and ARGV[9] ~= '' then
    -- In line already: when it joined, as its last attempt wrote it (a
    -- field without it, from an older client: its last look).
    local field = redis.call('HGET', KEYS[4], '~' .. token)
    if field then
      local look, was = string.match(field, '^%d+:%d+:(%d+):%d+:?(%d*)$')
      joined = tonumber(was) or tonumber(look) or joined
    end
  end
  if ARGV[9] and ARGV[9] ~= '' then
    -- The fifth part, when it joined the line: a resend judges by it
    -- whether a key was set before this waiter stood in line (acquire.lua).
    redis.call('HSET', KEYS[4], '~' .. token,
      lease .. ':' .. ARGV[3] .. ':' .. now_ms() .. ':' .. ARGV[9] .. ':' .. joined)
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
