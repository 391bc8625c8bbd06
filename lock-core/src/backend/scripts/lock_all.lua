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
-- ARGV[4]  0: one try; > 0: wait in line (at the first key that is not
--          free for the caller), keeping the place this many ms longer than
--          the caller will sleep
-- ARGV[5]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[5 + i]  the i-th key's release channel
--
-- A caller waits in one line at a time: the line of the first key that is
-- not free for it. It holds nothing while it waits (no hold-and-wait, so no
-- deadlock whatever order callers name their keys in), and leaves the
-- other keys' lines, telling the next in line if that makes it first.
--
-- Returns {fence1, ..., fencen}  (strings) all taken, or already ours
--         ms        (an integer) not now; look again within ms (-1: no
--                   expiry known)
--         {-1, j}   KEYS[j] holds a value of another type; nothing changed

local token = ARGV[1]
local n = #KEYS / 4
local publish = ARGV[5]

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
  local line, places = KEYS[4 * i - 1], KEYS[4 * i]
  local head = typed('LINDEX', line, '0')
  while type(head) == 'string' and head ~= token do
    local kept = typed('HGET', places, head)
    if type(kept) == 'table' then
      return {-1, 4 * i}
    end
    if (tonumber(kept) or 0) > now_ms() then
      return head
    end
    redis.call('LPOP', line)
    redis.call('HDEL', places, head)
    head = redis.call('LINDEX', line, '0')
  end
  if type(head) == 'table' then
    return {-1, 4 * i - 1}
  end
  return head or false
end

-- Look at every key: the first one that is not free for us, and when to
-- look again.
local blocked, sleep = nil, -1
local ours = {}
for i = 1, n do
  local lock = KEYS[4 * i - 3]
  local holder = typed('GET', lock)
  if type(holder) == 'table' then
    return {-1, 4 * i - 3}
  end
  local head = head_of(i)
  if type(head) == 'table' then
    return head
  end
  local value = unmarked(holder)
  if value == token then
    ours[i] = true
  elseif holder then
    blocked, sleep = i, redis.call('PTTL', lock)
    break
  elseif head and head ~= token then
    blocked = i
    sleep = tonumber(redis.call('HGET', KEYS[4 * i], head)) - now_ms()
    break
  end
end

if not blocked then
  local fences = {}
  for i = 1, n do
    local lock, fence_key, line, places = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
    local old = typed('GET', fence_key)
    if type(old) == 'table' then
      return {-1, 4 * i - 2}
    end
    local last = unmarked(old)
    if last and not tonumber(last) then
      return {-1, 4 * i - 2}
    end
    if ours[i] then
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

-- Not now. Give back every other key still ours (a grant whose reply was
-- lost, retried after one of its keys alone was taken from it, e.g. by an
-- operator's force_release, and given to another: the caller believes it
-- holds nothing, and must not, while it waits), leave
-- every other line (telling the new first in line when the lock there is
-- free), and with a wait, keep a place in the blocking key's.
for i = 1, n do
  if i ~= blocked then
    local lock, line, places = KEYS[4 * i - 3], KEYS[4 * i - 1], KEYS[4 * i]
    local holder = typed('GET', lock)
    local held = type(holder) == 'string' and unmarked(holder) == token
    if held then
      redis.call('DEL', lock)
    end
    local was_first = false
    if typed('HDEL', places, token) == 1 then
      was_first = redis.call('LINDEX', line, '0') == token
      redis.call('LREM', line, 1, token)
    end
    local next = redis.call('LINDEX', line, '0')
    if (held or was_first) and next and redis.call('EXISTS', lock) == 0 then
      redis.call(publish, ARGV[5 + i], 'next:' .. next)
    end
  end
end
local grace = tonumber(ARGV[4])
if grace > 0 then
  local i = blocked
  local lock, fence_key, line, places = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local counter = typed('GET', fence_key)
  local value, counter_marked = unmarked(counter)
  if type(counter) == 'table' or (value and not tonumber(value)) then
    return {-1, 4 * i - 2}
  end
  local keep = math.max(sleep, 0) + grace
  if redis.call('HSET', places, token, now_ms() + keep) == 1 then
    redis.call('RPUSH', line, token)
  end
  if redis.call('PTTL', line) < keep then
    redis.call('PEXPIRE', line, keep)
    redis.call('PEXPIRE', places, keep)
  end
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
