-- Renew permits and rw-lock sides at once (the watchdog's batch) or one
-- (extend): each lease that is still ours runs for its new length from now.
--
-- KEYS[i]       the holders hash of lease i (owner token ->
--               <kind><until>:<fence>, see family.rs)
-- ARGV[2i - 1]  the owner token of lease i
-- ARGV[2i]      the new lease length of lease i in ms; 0: only check that
--               it is ours
--
-- Returns one integer per lease: 1 renewed, 0 not ours (gone, expired),
-- -1 the key holds another type, -2 not ours because an operator released
-- it (family_force_release.lua left `<holders key without :lock>:forced`
-- naming this token)

local now = clock_ms()
local result = {}
for i = 1, #KEYS do
  local token, ttl = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local mine = typed('HGET', KEYS[i], token)
  local k, untl, fence = string.match(type(mine) == 'string' and mine or '', '^(%a)(%d+):(%d+)$')
  if type(mine) == 'table' then
    result[i] = -1
  elseif k and tonumber(untl) > now then
    if ttl > 0 then
      redis.call('HSET', KEYS[i], token, k .. (now + ttl) .. ':' .. fence)
      outlive(KEYS[i], now, now + ttl)
    end
    result[i] = 1
  else
    result[i] = 0
    local forced = string.sub(KEYS[i], 1, -6) .. ':forced'
    if redis.pcall('SISMEMBER', forced, token) == 1 then
      result[i] = -2
    end
  end
end
return result
