-- Read a semaphore or read-write lock as it is now, in one step. Reads only.
--
-- KEYS[1]  the holders: a hash, owner token -> <kind><until>:<fence>
-- KEYS[2]  the line of waiting tokens (list)
-- KEYS[3]  the waiters' places (hash: token -> <kind><until>)
--
-- Returns {n, token1, kind1, ms1, fence1, ...}  n waiters whose places are
--                                               kept, then each live holder:
--                                               its token, kind (s, r, w),
--                                               lease left in ms, fence
--         {-1, 1}  KEYS[1] is not a hash of holders (a plain lock, or
--                  something else)
local all = redis.pcall('HGETALL', KEYS[1])
if all.err then
  return {-1, 1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = {0}
for i = 1, #all, 2 do
  local k, untl, fence = string.match(all[i + 1], '^(%a)(%d+):(%d+)$')
  if not k then
    return {-1, 1}
  end
  if tonumber(untl) > now then
    reply[#reply + 1] = all[i]
    reply[#reply + 1] = k
    reply[#reply + 1] = tonumber(untl) - now
    reply[#reply + 1] = fence
  end
end
local line = redis.pcall('LRANGE', KEYS[2], 0, -1)
if not line.err then
  for _, token in ipairs(line) do
    local place = redis.pcall('HGET', KEYS[3], token)
    local untl = type(place) == 'string' and string.match(place, '^%a(%d+)$')
    if untl and tonumber(untl) > now then
      reply[1] = reply[1] + 1
    end
  end
end
return reply
