-- The handing on of a semaphore's permits or a rw lock's sides, run at
-- the end of family_release.lua and family_abandon.lua (concatenated after
-- them): each waiter in line that may go now, first in line first, whose
-- place carries what a grant needs (its '~' field), becomes a holder with
-- a fresh fencing token (the server clock in µs, raised above the fence
-- key and every live holder's; the key written when raised) and a lease of
-- at most the place life, leaves the line, and is told
-- `grant:<fence>:<server ms since its last attempt>:<that attempt's
-- name>:<token>`. The first that may go without the field is told
-- `next:<token>` and the handing on stops there (it looks itself).
--
-- The script before it defines: `holders` (family.lua's live_holders of
-- the key, read by it), `kind`, `now`, `now_ms` and `clock` (family.lua's
-- clock_ms: the fencing tokens are made of the same TIME reply), `base` (the
-- lock key less ':lock'), `line_key`, `places_key`, `fence_named` (the
-- fence key's name, or nil to name it from `base`), `permits`, `channel`,
-- `publish`, `here` (the name of the caller's client's wake-ups, or nil:
-- a grant to a waiter whose place carries it is not published, as the
-- caller announces its reply to its own waiters), and `finish(told)`,
-- which makes its reply of the messages told.

-- The line is walked from its head only (family.lua's live_head): the
-- cost of a release does not grow with the line's length.
local told = {}
local fence_key, last, fence_bad
while not nobody_may_go(kind, holders, permits) do
  local head = live_head(line_key, places_key, kind, now_ms)
  if not head or not may_go(head[2], 1, holders, {}, permits) then
    break
  end
  local record = head[4]
  local lease, life, seen, attempt, heard
  if type(record) == 'string' then
    lease, life, seen, attempt, heard = string.match(record, '^(%d+):(%d+):(%d+):(%d+):?(%x*)$')
  end
  if not fence_key then
    fence_key = fence_named or base .. ':fence'
    last = typed('GET', fence_key)
    if type(last) == 'string' and string.byte(last, 1) == 43 then
      last = string.sub(last, 2)
    end
    -- A fence key of another type: nobody is handed a grant (the
    -- waiter's own attempt reports it).
    fence_bad = type(last) == 'table' or (last and not tonumber(last))
  end
  if not attempt or fence_bad then
    -- Only woken: it looks itself (and tells the next).
    local message = 'next:' .. head[1]
    redis.call(publish, channel, message)
    told[#told + 1] = message
    break
  end
  -- The fencing token (family.lua's next_fence), the fence key written
  -- when raised.
  local fence, raised = next_fence(clock, last, holders)
  if raised then
    redis.call('SET', fence_key, fence, 'PX', life)
    last = fence
  end
  local untl = now + tonumber(lease)
  redis.call('HSET', KEYS[1], head[1], head[2] .. untl .. ':' .. fence)
  outlive(KEYS[1], now, untl)
  redis.call('LPOP', line_key)
  redis.call('HDEL', places_key, head[1], '~' .. head[1])
  -- (Its end as a number: nothing reads it past this point.)
  holders[#holders + 1] = {head[1], head[2], untl, fence}
  local message = 'grant:' .. fence .. ':' .. (now - tonumber(seen)) .. ':' .. attempt .. ':' .. head[1]
  -- A waiter of the caller's own client (its place carries the caller's
  -- `here`) hears its grant from the caller's reply: not published.
  if heard == '' or heard ~= here then
    redis.call(publish, channel, message)
  end
  told[#told + 1] = message
end
return finish(told)
