-- Keep a waiter's place in line alive while its client lives: the client
-- sends this every third of the place life while the waiter sleeps, so a
-- waiter whose process died or froze lapses within the place life, and
-- the line goes on without it (acquire.lua's ARGV[10]).
--
-- KEYS[1]  the places: a hash, waiting token -> until when (server ms), as
--          `<until>` for a plain lock or `lock_all`, `<kind><until>` for a
--          semaphore or rw lock (family.lua)
-- KEYS[2]  the lock key (any type): how long its holder's lease has left
-- ARGV[1]  the waiter's owner token
-- ARGV[2]  the place life in ms
--
-- Returns ms  kept until now + ARGV[2]; the lock's lease ends within ms
--             (-1: no expiry known; -2: the lock is free): a lease handed
--             to a waiter before this one ends sooner than the one this
--             waiter was told of when it slept, and it wakes then
--         -3  no such place, or it lapsed already (others may have passed
--             it, or a release handed the waiter the lock): the waiter
--             looks again at once instead

local place = redis.call('HGET', KEYS[1], ARGV[1])
if not place then
  return -3
end
local kind, untl = string.match(place, '^(%a?)(%d+)$')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not untl or tonumber(untl) <= now then
  return -3
end
redis.call('HSET', KEYS[1], ARGV[1], kind .. (now + tonumber(ARGV[2])))
return redis.call('PTTL', KEYS[2])
