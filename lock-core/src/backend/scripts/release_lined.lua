-- The rest of release.lua (see its comment for KEYS, ARGV and replies),
-- run after typed.lua and marker.lua: reached only when someone may wait
-- in line. Its locals `compact`, `holder`, `lined` and `keep` come from
-- release.lua, whose key is already deleted (or left to expire) here.

-- The name of the lock's `suffix` key in the compact form.
local function sibling(suffix)
  return string.sub(KEYS[1], 1, -6) .. suffix
end
local line = compact and sibling(':line') or KEYS[2]
local places = compact and sibling(':places') or KEYS[3]
local fence_key = compact and sibling(':fence') or KEYS[4]
if lined then
  -- The caller's grant record, if a release handed it this lock (hand_on
  -- below): the lock is given up, so it has no use left. Without this, a
  -- lock that always has someone in line kept one field per handoff in
  -- its places hash, whose expiry every waiter pushes on. (pcall: a
  -- places key of another type is left to hand_on's check below.)
  redis.pcall('HDEL', places, '~' .. ARGV[1])
end

-- (The helpers below are shared by the plain and the `lock_all` handoff,
-- and defined on every lined release. Measured with callgrind on Redis
-- 7.0, a release handing a plain waiter the lock: 144.7k instructions
-- before the `lock_all` handoff, 146.8k with it, 149.3k with these two
-- helpers instead of the writes and the fence read written out twice.)

-- A handoff's writes to one lock (its names given): the first in line,
-- `head`, leaves the line and its '~' field becomes the grant record; the
-- lock holds its token for `ttl` ms and the fence key `fence`, both with
-- the marker while someone else waits (the fence then living as long as
-- the line, at least `life` ms).
local function hand_to(lock, fence_key, line_key, places_key, head, ttl, life, fence)
  redis.call('LPOP', line_key)
  redis.call('HDEL', places_key, head)
  redis.call('HSET', places_key, '~' .. head, 'granted')
  if redis.call('LINDEX', line_key, '0') then
    redis.call('SET', lock, '+' .. head, 'PX', ttl)
    local keep = math.max(tonumber(life), redis.call('PTTL', line_key))
    redis.call('SET', fence_key, '+' .. fence, 'PX', keep)
  else
    redis.call('SET', lock, head, 'PX', ttl)
    redis.call('SET', fence_key, fence, 'PX', life)
  end
end

-- `fence` (a fencing token as a decimal string) raised above the last one
-- the fence key `fence_key` holds, if it is not already; nil (nothing to
-- hand on) when that key is of another type or not a number.
local function above_last(fence_key, fence)
  local old = typed('GET', fence_key)
  local last = unmarked(old)
  if type(old) == 'table' or (last and not tonumber(last)) then
    return nil
  end
  if last and tonumber(last) >= tonumber(fence) then
    return string.format('%d', tonumber(last) + 1)
  end
  return fence
end

-- The first in line is a `lock_all` waiter (its record, beside its place,
-- names the lock keys of its call: lock_all.lua): hand it every key at
-- once if each is free, its line led by the waiter with its place still
-- kept, and its fence key readable. Every key then holds the waiter's
-- token with the lease its record names and one fencing token (above the
-- last of every key, at least the server clock in µs), marked where others
-- still wait (as hand_on below writes one key); each place leaves its line
-- and each record becomes the grant record (lock_all.lua's modes keep a
-- key so marked). The message published, or nil (nothing written: the
-- waiter is told `next:` and looks itself), or false when another of the
-- keys still holds the caller's token (a `lock_all` giving its keys back
-- one by one: that key's release hands them over; nobody is told now, as
-- the waiter could only find that key held). The locks are looked at
-- first, before anything else is read.
local function hand_on_all(head, record, now, clock)
  local ttl, life, seen, attempt, names =
    string.match(record, '^(%d+):(%d+):(%d+):(%d+)@(.*)$')
  if not names then
    return nil
  end
  -- `<length>:<lock key>` for every key of the call.
  local bases, at = {}, 1
  while at <= #names do
    local colon = string.find(names, ':', at, true)
    local length = colon and tonumber(string.sub(names, at, colon - 1))
    if not length then
      return nil
    end
    bases[#bases + 1] = string.sub(names, colon + 1, colon + length - 5)
    at = colon + length + 1
  end
  local held = false
  for _, base in ipairs(bases) do
    local holder = typed('GET', base .. ':lock')
    if type(holder) == 'table' then
      return nil
    end
    if holder then
      if unmarked(holder) == ARGV[1] then
        return false
      end
      held = true
    end
  end
  if held then
    return nil
  end
  local fence = clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2]
  for _, base in ipairs(bases) do
    if typed('LINDEX', base .. ':line', '0') ~= head then
      return nil
    end
    local kept = typed('HGET', base .. ':places', head)
    if type(kept) ~= 'string' or (tonumber(kept) or 0) <= now then
      return nil
    end
    fence = above_last(base .. ':fence', fence)
    if not fence then
      return nil
    end
  end
  for _, base in ipairs(bases) do
    hand_to(base .. ':lock', base .. ':fence', base .. ':line', base .. ':places',
      head, ttl, life, fence)
  end
  return 'grant:' .. fence .. ':' .. (now - tonumber(seen)) .. ':' .. attempt .. ':' .. head
end

-- Hand the free lock to the first kept place in line if it may be (see the
-- top); the message published, or nil (nothing written).
local function hand_on()
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local head = typed('LINDEX', line, '0')
  local kept
  while type(head) == 'string' do
    kept = typed('HGET', places, head)
    if type(kept) == 'table' then
      return nil
    end
    if (tonumber(kept) or 0) > now then
      break
    end
    redis.call('LPOP', line)
    redis.call('HDEL', places, head, '~' .. head)
    head = redis.call('LINDEX', line, '0')
  end
  if type(head) ~= 'string' then
    return nil
  end
  local lease = redis.call('HGET', places, '~' .. head)
  if lease and string.find(lease, '@', 1, true) then
    return hand_on_all(head, lease, now, clock)
  end
  local ttl, life, seen, attempt
  if lease then
    -- (A fifth part, when the waiter joined the line, is for acquire.lua.)
    ttl, life, seen, attempt = string.match(lease, '^(%d+):(%d+):(%d+):(%d+):?%d*$')
  end
  if not seen then
    return nil
  end
  local fence = above_last(fence_key, clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2])
  if not fence then
    return nil
  end
  hand_to(KEYS[1], fence_key, line, places, head, ttl, life, fence)
  return 'grant:' .. fence .. ':' .. (now - tonumber(seen)) .. ':' .. attempt .. ':' .. head
end

if keep == 0 and not (compact and ARGV[3] == '1') and (compact or ARGV[5] == '0') then
  local granted = hand_on()
  if granted == false then
    return 1
  end
  if granted then
    if compact then
      redis.call('PUBLISH', sibling(':released'), granted)
    else
      redis.call(ARGV[4], ARGV[3], granted)
    end
    return granted
  end
end

local next = typed('LINDEX', line, '0')
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
