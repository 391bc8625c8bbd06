-- Take a permit of a semaphore, or a side of a read-write lock, if it may
-- be granted now without passing over anyone in line (family.lua says
-- when); else keep (or take) the caller's place in line.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the fence key: the last fencing token issued (an integer)
-- KEYS[3]  the line: a list of waiting owner tokens, first come first served
-- KEYS[4]  the places: a hash, waiting token -> <kind><until>
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the caller's kind: s (permit), r (read share), w (writer)
-- ARGV[3]  the lease length in ms
-- ARGV[4]  how long the fence key outlives a grant, in ms
-- ARGV[5]  0: one try; > 0: wait in line, keeping the place this many ms
--          longer than the caller will sleep
-- ARGV[6]  the permits of a semaphore (ignored for the rw lock)
-- ARGV[7]  the release channel (same hash tag)
-- ARGV[8]  the publish command: PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns fence    (a string) granted, or already ours (a retried call)
--         ms       (an integer) not now: look again within ms (-1: nothing
--                  known ends sooner)
--         {-1, i}  KEYS[i] holds another type, or the key is used by
--                  another primitive; nothing was changed

local token, kind = ARGV[1], ARGV[2]
local ttl = tonumber(ARGV[3])
local permits = tonumber(ARGV[6])
local now = clock_ms()

local holders = live_holders(KEYS[1], kind, now)
if not holders then
  return {-1, 1}
end
for _, holder in ipairs(holders) do
  if holder[1] == token then
    -- Ours already: a retried call. Same grant, lease from now.
    redis.call('HSET', KEYS[1], token, kind .. (now + ttl) .. ':' .. holder[4])
    outlive(KEYS[1], now, now + ttl)
    return holder[4]
  end
end
local line, bad = live_line(KEYS[3], KEYS[4], kind, now)
if not line then
  return {-1, bad}
end
local position = #line + 1
for i, waiter in ipairs(line) do
  if waiter[1] == token then
    position = i
    break
  end
end

if may_go(kind, position, holders, line, permits) then
  local last = typed('GET', KEYS[2])
  if type(last) == 'table' then
    return {-1, 2}
  end
  if last and string.byte(last, 1) == 43 then
    last = string.sub(last, 2)
  end
  if last and not tonumber(last) then
    return {-1, 2}
  end
  local t = redis.call('TIME')
  local floor = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local fence = floor
  if last and tonumber(last) >= tonumber(floor) then
    fence = string.format('%d', tonumber(last) + 1)
  end
  redis.call('SET', KEYS[2], fence, 'PX', ARGV[4])
  redis.call('HSET', KEYS[1], token, kind .. (now + ttl) .. ':' .. fence)
  outlive(KEYS[1], now, now + ttl)
  if position <= #line then
    redis.call('LREM', KEYS[3], 1, token)
    redis.call('HDEL', KEYS[4], token)
    table.remove(line, position)
  end
  -- The next in line may go too (another permit, another reader): tell it.
  holders[#holders + 1] = {token, kind, now + ttl, fence}
  local next = line[1]
  if next and may_go(next[2], 1, holders, line, permits) then
    redis.call(ARGV[8], ARGV[7], 'next:' .. next[1])
  end
  return fence
end

-- Not now: sleep until the first lease ends or the first place in line
-- lapses, whichever is sooner.
local wake = -1
for _, holder in ipairs(holders) do
  if wake < 0 or holder[3] < wake then
    wake = holder[3]
  end
end
if line[1] and line[1][1] ~= token and (wake < 0 or line[1][3] < wake) then
  wake = line[1][3]
end
local sleep = -1
if wake >= 0 then
  sleep = wake - now
end
local grace = tonumber(ARGV[5])
if grace > 0 then
  local keep = math.max(sleep, 0) + grace
  if redis.call('HSET', KEYS[4], token, kind .. (now + keep)) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  outlive(KEYS[3], now, now + keep)
  outlive(KEYS[4], now, now + keep)
end
return sleep
