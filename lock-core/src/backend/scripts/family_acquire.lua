-- Take a permit of a semaphore, or a side of a read-write lock, if it may
-- be granted now without passing over anyone in line (family.lua says
-- when); else keep (or take) the caller's place in line.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the fence key: the last fencing token issued above the server
--          clock (an integer; a token that is the clock is not written)
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
-- Compact form, one server only (not Cluster), the common case: KEYS[1]
-- and ARGV[1..6] alone; the fence key, the line, the places and the
-- channel are then named from KEYS[1] (`…:lock` → `…:fence`, `…:line`,
-- `…:places`, `…:released`), announced with PUBLISH. Each key or argument
-- passed costs Redis CPU on every call (see release.lua).
--
-- Free (neither KEYS[1] nor the line nor the fence key exists), the whole
-- call is TIME, EXISTS, HSET and PEXPIRE: no line read, no fence written.
--
-- Returns fence    (a string) granted, or already ours (a retried call)
--         ms       (an integer) not now: look again within ms (-1: nothing
--                  known ends sooner)
--         {-1, i}  KEYS[i] holds another type, or the key is used by
--                  another primitive; nothing was changed

local token, kind = ARGV[1], ARGV[2]
local base = string.sub(KEYS[1], 1, -6)
local fence_key = KEYS[2] or base .. ':fence'
local line_key = KEYS[3] or base .. ':line'
local ttl = tonumber(ARGV[3])
local permits = tonumber(ARGV[6])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- The server clock in µs, as a decimal string: a grant's fencing token
-- unless something issued earlier is as high.
local clock = time[1] .. string.rep('0', 6 - #time[2]) .. time[2]

-- Free: no holders, nobody in line and no fence key (none of the three
-- exists, whatever its type: a key of another type takes the full way
-- below, which reports it). Nothing to drop, nobody to pass over or to
-- tell, nothing issued above the clock: take it, the clock is the token.
-- (A fence key is written only for a raised token, so it is seldom there;
-- with one, the full way grants the same.)
if redis.call('EXISTS', KEYS[1], line_key, fence_key) == 0 then
  redis.call('HSET', KEYS[1], token, kind .. (now + ttl) .. ':' .. clock)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return clock
end

-- The fencing token of a grant now: the server clock in µs, raised to one
-- above `top` (the highest token of a live holder, or nil) and above the
-- last token the fence key keeps. The key is written only when the token
-- is above the clock: then it is what the next grant must exceed (a clock
-- that moves on exceeds a token that was the clock). Returns nil, leaving
-- everything as it was, when the fence key holds something else.
local function grant_fence(top)
  local last = typed('GET', fence_key)
  if type(last) == 'table' then
    return nil
  end
  if last and string.byte(last, 1) == 43 then
    last = string.sub(last, 2)
  end
  if last and not tonumber(last) then
    return nil
  end
  local high = tonumber(clock) - 1
  if last and tonumber(last) > high then
    high = tonumber(last)
  end
  if top and top > high then
    high = top
  end
  if high < tonumber(clock) then
    return clock
  end
  local fence = string.format('%d', high + 1)
  redis.call('SET', fence_key, fence, 'PX', ARGV[4])
  return fence
end

-- Named only past the free case: building a name costs the server time
-- on every call.
local places_key = KEYS[4] or base .. ':places'
local channel = ARGV[7] or base .. ':released'
local publish = ARGV[8] or 'PUBLISH'

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
local line, bad = live_line(line_key, places_key, kind, now)
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
  local top
  for _, holder in ipairs(holders) do
    if not top or tonumber(holder[4]) > top then
      top = tonumber(holder[4])
    end
  end
  local fence = grant_fence(top)
  if not fence then
    return {-1, 2}
  end
  redis.call('HSET', KEYS[1], token, kind .. (now + ttl) .. ':' .. fence)
  outlive(KEYS[1], now, now + ttl)
  if position <= #line then
    redis.call('LREM', line_key, 1, token)
    redis.call('HDEL', places_key, token)
    table.remove(line, position)
  end
  -- The next in line may go too (another permit, another reader): tell it.
  holders[#holders + 1] = {token, kind, now + ttl, fence}
  local next = line[1]
  if next and may_go(next[2], 1, holders, line, permits) then
    redis.call(publish, channel, 'next:' .. next[1])
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
  if redis.call('HSET', places_key, token, kind .. (now + keep)) == 1 then
    redis.call('RPUSH', line_key, token)
  end
  outlive(line_key, now, now + keep)
  outlive(places_key, now, now + keep)
end
return sleep
