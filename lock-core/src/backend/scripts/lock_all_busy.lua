-- lock_all.lua past its free case (see there): some key is held, or has
-- a line, or something to look at more closely. Runs with the names that
-- lock_all.lua set up for either form: K[4i-3..4i] (the i-th key's lock,
-- fence, line and places), channels[i], publish, token, n, grace, life,
-- claimed and taken_back (claimed or resent mode: a key of the caller's
-- left by the pre-step is the first attempt's grant, and is given a fresh
-- fence; a key it took back is told about like one given back), and
-- named (the attempt's name, compact form: the waiter's records).
local clock
local function now_ms()
  if not clock then
    clock = redis.call('TIME')
  end
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- The first live waiter of key i's line (dropping lapsed places), or false;
-- {-1, j} for a key of another type.
local function head_of(i)
  local line, places = K[4 * i - 1], K[4 * i]
  local head = typed('LINDEX', line, '0')
  while type(head) == 'string' and head ~= token do
    local kept = typed('HGET', places, head)
    if type(kept) == 'table' then
      return {-1, 4 * i}
    end
    if kept and string.find(kept, '^%a') then
      -- A semaphore's or rw lock's waiter (`<kind><until>`): key i is
      -- that primitive's while it waits (kinds never mix).
      return {-1, 4 * i - 3}
    end
    if (tonumber(kept) or 0) > now_ms() then
      return head
    end
    redis.call('LPOP', line)
    -- (A plain lock's waiter has a '~' field beside its place: acquire.lua.)
    redis.call('HDEL', places, head, '~' .. head)
    head = redis.call('LINDEX', line, '0')
  end
  if type(head) == 'table' then
    return {-1, 4 * i - 1}
  end
  return head or false
end

-- Look at every key: which are not free for us, and how long until the
-- last of them may be (-1: unknown).
local blocked, sleep, unknown = false, 0, false
local ours = {}
local present, live = 0, 0 -- our places, and those still kept
for i = 1, n do
  local lock = K[4 * i - 3]
  local holder = typed('GET', lock)
  if type(holder) == 'table' then
    return {-1, 4 * i - 3}
  end
  local head = head_of(i)
  if type(head) == 'table' then
    return head
  end
  local value = unmarked(holder)
  local wait
  if value == token then
    ours[i] = true
  elseif holder then
    wait = redis.call('PTTL', lock)
  elseif head and head ~= token then
    wait = tonumber(redis.call('HGET', K[4 * i], head)) - now_ms()
  end
  if wait then
    blocked = true
    if wait < 0 then
      unknown = true
    else
      sleep = math.max(sleep, wait)
    end
  end
  if grace > 0 then
    local kept = typed('HGET', K[4 * i], token)
    if type(kept) == 'table' then
      return {-1, 4 * i}
    end
    if kept then
      present = present + 1
      if tonumber(kept) > now_ms() then
        live = live + 1
      end
    end
  end
end

if not blocked then
  local fences = {}
  for i = 1, n do
    local lock, fence_key, line, places = K[4 * i - 3], K[4 * i - 2], K[4 * i - 1], K[4 * i]
    local old = typed('GET', fence_key)
    if type(old) == 'table' then
      return {-1, 4 * i - 2}
    end
    local last = unmarked(old)
    if last and not tonumber(last) then
      return {-1, 4 * i - 2}
    end
    if ours[i] and not claimed then
      -- A retried call: same lease, same fence.
      redis.call('PEXPIRE', lock, ARGV[2])
      fences[i] = last or '0'
    else
      clock = redis.call('TIME')
      local floor = clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2]
      local fence = floor
      if last and tonumber(last) >= tonumber(floor) then
        fence = string.format('%d', tonumber(last) + 1)
      end
      if redis.call('LINDEX', line, '0') == token then
        redis.call('LPOP', line)
        redis.call('HDEL', places, token)
        redis.call('HDEL', places, '~' .. token)
      end
      if redis.call('LINDEX', line, '0') then
        -- Others wait: the markers, as acquire.lua writes them.
        local life = math.max(tonumber(ARGV[3]), redis.call('PTTL', line))
        redis.call('SET', fence_key, '+' .. fence, 'PX', life)
        redis.call('SET', lock, '+' .. token, 'PX', ARGV[2])
      else
        redis.call('SET', fence_key, fence, 'PX', ARGV[3])
        redis.call('SET', lock, token, 'PX', ARGV[2])
      end
      fences[i] = fence
    end
  end
  return fences
end
if unknown then
  sleep = -1
end

-- With a wait, check the fence keys before changing anything.
for i = 1, grace > 0 and n or 0 do
  local counter = typed('GET', K[4 * i - 2])
  local value = unmarked(counter)
  if type(counter) == 'table' or (value and not tonumber(value)) then
    return {-1, 4 * i - 2}
  end
end

-- Not now. Give back every key still ours (a grant whose reply was lost,
-- retried after one of its keys alone was taken from it, e.g. by an
-- operator's force_release, and given to another: the caller believes it
-- holds nothing, and must not, while it waits). Without a wait, or with
-- a place lapsed or lost in some line, leave every line (telling the new
-- first in line when the lock there is free), to join them all again at
-- the back: our places always stand for one arrival.
local rejoin = grace == 0 or (present > 0 and live < n)
for i = 1, n do
  local lock, line, places = K[4 * i - 3], K[4 * i - 1], K[4 * i]
  local held = taken_back[i] or false
  if ours[i] then
    redis.call('DEL', lock)
    held = true
  end
  local was_first = false
  if rejoin and redis.call('HDEL', places, token) == 1 then
    redis.call('HDEL', places, '~' .. token)
    was_first = redis.call('LINDEX', line, '0') == token
    redis.call('LREM', line, 1, token)
  end
  local next = redis.call('LINDEX', line, '0')
  if (held or was_first) and next and next ~= token and redis.call('EXISTS', lock) == 0 then
    redis.call(publish, channels[i], 'next:' .. next)
  end
end
if grace == 0 then
  return sleep
end

-- Keep (or take) a place in every line, and the line markers (see
-- acquire.lua) on each key.
local keep = math.max(sleep, 0) + grace
-- With a place life (`life`), the places lapse that soon unless their
-- client keeps them (keep_place.lua).
local until_ms = now_ms() + (life and math.min(keep, life) or keep)
-- Named: the record beside each place (see lock_all.lua), the lease at
-- most the place life.
local record
if named then
  local lease = ARGV[2]
  if life and tonumber(lease) > life then
    lease = ARGV[5]
  end
  local names = {}
  for i = 1, n do
    names[i] = #K[4 * i - 3] .. ':' .. K[4 * i - 3]
  end
  record = lease .. ':' .. ARGV[3] .. ':' .. now_ms() .. ':' .. named .. '@' .. table.concat(names)
end
for i = 1, n do
  local lock, fence_key, line, places = K[4 * i - 3], K[4 * i - 2], K[4 * i - 1], K[4 * i]
  if redis.call('HSET', places, token, until_ms) == 1 then
    redis.call('RPUSH', line, token)
  end
  if record then
    redis.call('HSET', places, '~' .. token, record)
  end
  if redis.call('PTTL', line) < keep then
    redis.call('PEXPIRE', line, keep)
    redis.call('PEXPIRE', places, keep)
  end
  local value, counter_marked = unmarked(redis.call('GET', fence_key))
  local life = redis.call('PTTL', fence_key)
  if not counter_marked or (life >= 0 and life < keep) then
    if life == -1 then
      redis.call('SET', fence_key, '+' .. (value or '0'), 'KEEPTTL')
    else
      redis.call('SET', fence_key, '+' .. (value or '0'), 'PX', math.max(life, keep))
    end
  end
  local holder, holder_marked = unmarked(redis.call('GET', lock))
  if holder and not holder_marked and string.find(holder, '^' .. string.rep('%x', 32) .. ':') then
    redis.call('SET', lock, '+' .. holder, 'KEEPTTL')
  end
end
return sleep
