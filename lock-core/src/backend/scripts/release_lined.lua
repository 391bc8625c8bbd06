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
  local ttl, life, seen, attempt
  if lease then
    -- (A fifth part, when the waiter joined the line, is for acquire.lua.)
    ttl, life, seen, attempt = string.match(lease, '^(%d+):(%d+):(%d+):(%d+):?%d*$')
  end
  if not seen then
    return nil
  end
  local old = typed('GET', fence_key)
  local last = unmarked(old)
  if type(old) == 'table' or (last and not tonumber(last)) then
    return nil
  end
  local fence = clock[1] .. string.rep('0', 6 - #clock[2]) .. clock[2]
  if last and tonumber(last) >= tonumber(fence) then
    fence = string.format('%d', tonumber(last) + 1)
  end
  redis.call('LPOP', line)
  redis.call('HDEL', places, head)
  redis.call('HSET', places, '~' .. head, 'granted')
  if redis.call('LINDEX', line, '0') then
    redis.call('SET', KEYS[1], '+' .. head, 'PX', ttl)
    local keep = math.max(tonumber(life), redis.call('PTTL', line))
    redis.call('SET', fence_key, '+' .. fence, 'PX', keep)
  else
    redis.call('SET', KEYS[1], head, 'PX', ttl)
    redis.call('SET', fence_key, fence, 'PX', life)
  end
  return 'grant:' .. fence .. ':' .. (now - tonumber(seen)) .. ':' .. attempt .. ':' .. head
end

if keep == 0 and not (compact and ARGV[3] == '1') and (compact or ARGV[5] == '0') then
  local granted = hand_on()
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
