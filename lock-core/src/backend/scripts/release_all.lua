-- Give back the keys of a `lock_all` in their common state, all in one
-- call: each key that holds exactly the caller's token (unmarked: nobody
-- waits in its line, see acquire.lua) is deleted, as release.lua's
-- shortest form deletes it; every other key is left untouched for the
-- caller's per-key release.lua (a marked token whose line must be handed
-- the lock or woken, a lock that is not ours any more, another type).
--
-- One server only (not Cluster), no keep (`at_least`), no survival mark,
-- no announcement: an unmarked key has nobody in line to tell (release.lua
-- announces nothing for it either).
--
-- KEYS[i]  the i-th lock key of the `lock_all` (sorted, no duplicates)
-- ARGV[1]  the caller's owner token
--
-- Returns 0             every key was ours and unmarked: all deleted
--         {i, j, ...}   (1-based) the keys left untouched; every other key
--                       was ours and unmarked, and is deleted
--
-- Kept minimal (each argument, command and definition costs every call,
-- see release.lua): a GET per key, then in the common case one DEL of
-- every key; only GET and DEL, the commands release.lua calls (the
-- minimal ACL rule of docs/topologies.md has no MGET). A key of another
-- type makes GET fail: `pcall` turns that into a value never equal to the
-- token, and the key is left for release.lua to report. Measured with INFO
-- commandstats on Redis 7.0 (noisy, 2 shared cores): 1.9–2.5 µs per 2-key
-- call, 2.6–3.2 µs per 3-key call, against 1.4 µs per one-key call of
-- release.lua's shortest form (so 2.8 µs for two keys).
-- The caller sends at most a few hundred keys (`unpack` stops near 8000);
-- a larger lock_all is released key by key.

for i = 1, #KEYS do
  if redis.pcall('GET', KEYS[i]) ~= ARGV[1] then
    -- The keys before i are ours and unmarked; those after are looked at
    -- one by one.
    local left = {i}
    for j = i + 1, #KEYS do
      if redis.pcall('GET', KEYS[j]) == ARGV[1] then
        redis.call('DEL', KEYS[j])
      else
        left[#left + 1] = j
      end
    end
    if i > 1 then
      redis.call('DEL', unpack(KEYS, 1, i - 1))
    end
    return left
  end
end
redis.call('DEL', unpack(KEYS))
return 0
