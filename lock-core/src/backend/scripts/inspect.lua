-- Read one lock as it is now, in one step (so the holder, the lease left,
-- the fencing token and the line agree with each other). Reads only.
--
-- KEYS[1]  the lock key (string: owner token, with a PX expiry)
-- KEYS[2]  the fence key (integer counter)
-- KEYS[3]  the line of waiting tokens (list)
-- KEYS[4]  the waiters' places (hash: token -> until when, in server ms)
-- KEYS[5]  (optional) the grant record (record.lua): '<fence> <owner token>'
--
-- Returns {}                          the lock is free
--         {token, pttl, fence, n, r}  held by `token` for `pttl` more ms (-1:
--                                     no expiry), fencing counter `fence`
--                                     (0: none), `n` waiters whose places
--                                     are still kept; `r` the holder's
--                                     recorded fencing token, '' if KEYS[5]
--                                     holds no record of this holder (a
--                                     lease the fast path took a moment ago)
--         {-1, i}                     KEYS[i] holds a value of another type
--                                     (KEYS[1]: also a string that is not
--                                     an owner token, written by something
--                                     else: no holder to show)
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  return {-1, 1}
end
if not holder then
  return {}
end
-- An owner token: 32 hex digits, ':', the client's name (token.rs).
holder = unmarked(holder)
if not string.find(holder, '^' .. string.rep('%x', 32) .. ':') then
  return {-1, 1}
end
local pttl = redis.call('PTTL', KEYS[1])

local fence = redis.pcall('GET', KEYS[2])
if type(fence) == 'table' then
  return {-1, 2}
end

local line = redis.pcall('LRANGE', KEYS[3], 0, -1)
if line.err then
  return {-1, 3}
end
local waiters = 0
if #line > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, token in ipairs(line) do
    local kept = redis.pcall('HGET', KEYS[4], token)
    if type(kept) == 'table' then
      return {-1, 4}
    end
    if (tonumber(kept) or 0) > now then
      waiters = waiters + 1
    end
  end
end
local recorded = ''
if KEYS[5] then
  local record = redis.pcall('GET', KEYS[5])
  if type(record) == 'string' then
    local space = string.find(record, ' ', 1, true)
    if space and string.sub(record, space + 1) == holder then
      recorded = string.sub(record, 1, space - 1)
    end
  end
end
return {holder, pttl, unmarked(fence) or '0', waiters, recorded}
