-- The rest of family_acquire.lua (see its comment for KEYS, ARGV and
-- replies), run after typed.lua and family.lua: reached when the key, its
-- line or its fence exists. Its locals (`token`, `kind`, `base`, the key
-- names, `ttl`, `permits`, `time`, `now`, `now_ms`, `clock`) come from
-- family_acquire.lua.

-- The fencing token of a grant now (family.lua's next_fence over the
-- live `holders` and the fence key's last token; the key written when
-- raised). Returns nil, leaving everything as it was, when the fence key
-- holds something else.
local function grant_fence(holders)
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
  local fence, raised = next_fence(clock, last, holders)
  if raised then
    redis.call('SET', fence_key, fence, 'PX', ARGV[4])
  end
  return fence
end

-- Named only past the free case: building a name costs the server time
-- on every call.
local places_key = KEYS[4] or base .. ':places'
local channel = (ARGV[7] ~= '' and ARGV[7]) or base .. ':released'
local publish = (ARGV[8] ~= '' and ARGV[8]) or 'PUBLISH'

local holders = live_holders(KEYS[1], kind, now_ms)
if not holders then
  -- A plain lock's key while this primitive's waiters stand in its line
  -- (the caller, or whoever is first): a fast plain acquisition's SET of a
  -- moment (fast.rs), which its script gives back at once, waking the first
  -- in line with 'again:' (acquire_contended.lua; kinds never mix: no
  -- plain lock is granted while a family waiter is first in line). The key
  -- is still this primitive's: the caller keeps its place, if it has one,
  -- and looks again then.
  if redis.call('TYPE', KEYS[1]).ok == 'string' then
    local ours = tonumber(ARGV[5]) > 0 and redis.call('HEXISTS', places_key, token) == 1
    if not ours then
      local first = redis.pcall('LINDEX', line_key, '0')
      local place = type(first) == 'string' and redis.pcall('HGET', places_key, first)
      ours = type(place) == 'string' and string.find(place, '^%a') ~= nil
        and same_family(string.sub(place, 1, 1), kind)
    end
    if ours then
      return math.min(math.max(redis.call('PTTL', KEYS[1]), 1), 100)
    end
  end
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
-- Nobody may go now whatever the line holds (every permit taken, a
-- writer holding against a reader, anyone holding against a writer):
-- busy, reading only this waiter's own place (one that lapsed leaves the
-- line: its position is lost), not the line. Until a holder leaves,
-- nobody in line may go: its head changes neither the answer nor the
-- wake-up (the first lease's end), and a lapsed head is left for the
-- next reader. A waiter's attempt costs the same however long the line
-- is. (The line holds only this primitive's waiters while it has live
-- holders: each joined behind them, or was checked on joining.)
local full
if kind == 'w' then
  full = #holders > 0
else
  full = nobody_may_go(kind, holders, permits)
end
local line, bad
-- Whether the caller keeps a live place in line (then it is not pushed
-- onto the line again below).
local placed = false
if full then
  local own = typed('HGET', places_key, token)
  if type(own) == 'table' then
    return {-1, 4}
  end
  local k, untl = string.match(own or '', '^(%a)(%d+)$')
  if own and (not k or not same_family(k, kind)) then
    return {-1, 1}
  end
  placed = k and above(untl, now_ms)
  if k and not placed then
    redis.call('LREM', line_key, '1', token)
    redis.call('HDEL', places_key, token, '~' .. token)
  end
  line = {}
else
  line, bad = live_line(line_key, places_key, kind, now_ms)
  if not line then
    return {-1, bad}
  end
end
local position = #line + 1
for i, waiter in ipairs(line) do
  if waiter[1] == token then
    position = i
    placed = true
    break
  end
end

if may_go(kind, position, holders, line, permits) then
  local fence = grant_fence(holders)
  if not fence then
    return {-1, 2}
  end
  redis.call('HSET', KEYS[1], token, kind .. (now + ttl) .. ':' .. fence)
  outlive(KEYS[1], now, now + ttl)
  if position <= #line then
    redis.call('LREM', line_key, '1', token)
    redis.call('HDEL', places_key, token, '~' .. token)
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
-- (Lease ends and places' ends are decimal strings, compared as such.)
local wake
for _, holder in ipairs(holders) do
  if not wake or above(wake, holder[3]) then
    wake = holder[3]
  end
end
if line[1] and line[1][1] ~= token and (not wake or above(wake, line[1][3])) then
  wake = line[1][3]
end
local sleep = -1
if wake then
  sleep = tonumber(wake) - now
end
local grace = tonumber(ARGV[5])
if grace > 0 then
  local keep = math.max(sleep, 0) + grace
  -- With a place life (ARGV[9]), the place lapses that soon unless its
  -- client keeps it (keep_place.lua): a waiter that died or froze holds
  -- the line up for at most about that long.
  local life = tonumber(ARGV[9] or '')
  local place = keep
  if life then
    place = math.min(keep, life)
  end
  -- Pushed first: a line of another type (which a full key's busy reply
  -- does not read) is reported before anything is written.
  if not placed and type(typed('RPUSH', line_key, token)) == 'table' then
    return {-1, 3}
  end
  -- With this attempt's name (ARGV[10]), what a release needs to hand
  -- this waiter its grant: a lease of at most the place life (its
  -- client's watchdog extends a longer one), so that a grant handed to
  -- a waiter that died holds the others up no longer than its place;
  -- and (ARGV[11]) the name of its client's wake-ups. Written with the
  -- place, in one HSET. (Its numbers as they were sent, and `now` as its
  -- string: a number made a string costs the server about 5k
  -- instructions.)
  if ARGV[10] then
    local lease = ARGV[3]
    if life and ttl > life then
      lease = ARGV[9]
    end
    local record = lease .. ':' .. ARGV[4] .. ':' .. now_ms .. ':' .. ARGV[10]
    if ARGV[11] then
      record = record .. ':' .. ARGV[11]
    end
    redis.call('HSET', places_key, token, kind .. (now + place), '~' .. token, record)
  else
    redis.call('HSET', places_key, token, kind .. (now + place))
  end
  outlive(line_key, now, now + keep)
  outlive(places_key, now, now + keep)
end
return sleep
