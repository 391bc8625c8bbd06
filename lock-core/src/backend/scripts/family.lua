-- Prepended to the scripts of the semaphore and the read-write lock (see
-- family.rs for their data layout): reading their holders and their line.
--
-- A holder's value is `<kind><until>:<fence>`, a waiter's place
-- `<kind><until>`; kind is s (permit), r (read share) or w (writer).
-- Beside a waiter's place, '~' .. token -> '<lease ms>:<fence life
-- ms>:<server ms of its last attempt>:<that attempt's name>[:<its
-- client's wake-ups' name>]' (written by family_acquire.lua): what
-- family_release.lua needs to hand the waiter its grant.

-- The server clock, read once per script: in ms as a number and as a
-- decimal string (lease ends are compared as strings, see `above`), and
-- in µs as a decimal string (a grant's fencing token, see next_fence).
local function clock_ms()
  local t = redis.call('TIME')
  local us = string.rep('0', 6 - #t[2]) .. t[2]
  local ms = t[1] .. string.sub(us, 1, 3)
  return tonumber(ms), ms, t[1] .. us
end

-- Whether the decimal integer string a (a fencing token, a lease end in
-- ms; no leading zeros) is above b: compared as strings, since every
-- `tonumber` costs the server about 2k instructions.
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end

-- Whether kinds a and b belong to the same primitive (a permit is no share).
local function same_family(a, b)
  return (a == 's') == (b == 's')
end

-- The live holders of the hash `key` as a list of {token, kind, until,
-- fence} (until and fence as decimal strings), dropping the expired ones
-- (`now`: clock_ms's string) on the way; or false when the key
-- holds another type or a holder of another primitive than `kind`. `all`:
-- the key's HGETALL reply, when the caller has read it already; `skip`: a
-- token left out (a release's own, given back by then).
local function live_holders(key, kind, now, all, skip)
  all = all or typed('HGETALL', key)
  if all.err then
    return false
  end
  local live = {}
  -- (same_family inlined, and each end parsed once: this loop runs for
  -- every holder on each release and each busy ask.)
  local permit = kind == 's'
  for i = 1, #all, 2 do
    local token, value = all[i], all[i + 1]
    if token ~= skip then
      local k, untl, fence = string.match(value, '^(%a)(%d+):(%d+)$')
      if not k or (k == 's') ~= permit then
        return false
      end
      if not above(untl, now) then
        redis.call('HDEL', key, token)
      else
        live[#live + 1] = {token, k, untl, fence}
      end
    end
  end
  return live
end

-- The live waiters of the line `line` (places in the hash `places`) as a
-- list of {token, kind, until} (until a decimal string, compared with
-- `now`, clock_ms's string), dropping lapsed places on the way; or
-- false, index for a key of another type (3 the line, 4 the places) or a
-- waiter of another primitive.
local function live_line(line, places, kind, now)
  local tokens = typed('LRANGE', line, '0', '-1')
  if tokens.err then
    return false, 3
  end
  local live = {}
  for _, token in ipairs(tokens) do
    local place = typed('HGET', places, token)
    if type(place) == 'table' then
      return false, 4
    end
    local k, untl = string.match(place or '', '^(%a)(%d+)$')
    if place and not k then
      -- A plain lock's waiter: this key is in use as a plain lock.
      return false, 1
    end
    if k and not same_family(k, kind) then
      return false, 1
    end
    if not k or not above(untl, now) then
      redis.call('LREM', line, '1', token)
      redis.call('HDEL', places, token, '~' .. token)
    else
      live[#live + 1] = {token, k, untl}
    end
  end
  return live
end

-- The first live waiter in line, for a release's handing on: {token,
-- kind, until, record}, where record is its '~' field (what a grant
-- needs) or false, read after its place (two HGETs, not one HMGET: the
-- documented minimal ACL rule has no HMGET); dropping (LPOP, HDEL)
-- the lapsed or missing places before it as live_line does; nil when
-- nobody lives in line; false and live_line's code when the line or a
-- place holds another type, or the head is of another kind. It reads the
-- line from its head only: the cost does not grow with the line's length
-- (live_line reads every place).
local function live_head(line, places, kind, now)
  while true do
    local token = typed('LINDEX', line, '0')
    if type(token) == 'table' then
      return false, 3
    end
    if not token then
      return nil
    end
    local place = typed('HGET', places, token)
    if type(place) == 'table' then
      return false, 4
    end
    local k, untl = string.match(place or '', '^(%a)(%d+)$')
    if (place and not k) or (k and not same_family(k, kind)) then
      return false, 1
    end
    if k and above(untl, now) then
      -- (The places key is a hash: read above.)
      return {token, k, untl, redis.call('HGET', places, '~' .. token)}
    end
    redis.call('LPOP', line)
    redis.call('HDEL', places, token, '~' .. token)
  end
end

-- Whether a writer is among the live `holders` of a rw lock.
local function writer_holds(holders)
  for _, holder in ipairs(holders) do
    if holder[2] == 'w' then
      return true
    end
  end
  return false
end

-- Whether a waiter of `kind` at `position` (1-based; #line + 1 for one not
-- in line) of `line` may go now, given the live `holders` and `permits`
-- (semaphores only).
local function may_go(kind, position, holders, line, permits)
  if kind == 's' then
    return #holders + position <= permits
  end
  if kind == 'w' then
    return #holders == 0 and position == 1
  end
  if writer_holds(holders) then
    return false
  end
  for i = 1, position - 1 do
    if line[i][2] == 'w' then
      return false
    end
  end
  return true
end

-- The fencing token of a grant now: `clock` (the server clock in µs, a
-- decimal string) unless `last` (the fence key's token, without its
-- marker) or a live holder's token is as high; then one above the
-- highest, and true: the caller writes it to the fence key, so that the
-- next grant exceeds it (a clock that moves on exceeds a token that was
-- the clock). Compared as strings (`above`), converted only to raise.
local function next_fence(clock, last, holders)
  local top = last
  for _, holder in ipairs(holders) do
    if not top or above(holder[4], top) then
      top = holder[4]
    end
  end
  if top and not above(clock, top) then
    return string.format('%d', tonumber(top) + 1), true
  end
  return clock, false
end

-- Whether nobody in line may go now, whoever stands first: every permit
-- of a semaphore (`kind` s) is taken, or a writer holds a rw lock. (A
-- handing on stops here without reading the line.)
local function nobody_may_go(kind, holders, permits)
  if kind == 's' then
    return #holders >= permits
  end
  return writer_holds(holders)
end

-- Make the hash `key` live at least until `untl` (server ms).
local function outlive(key, now, untl)
  if redis.call('PTTL', key) < untl - now then
    redis.call('PEXPIRE', key, untl - now)
  end
end
