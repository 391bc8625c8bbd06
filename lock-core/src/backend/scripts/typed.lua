-- Prepended to every script that calls `typed` (see mod.rs): one helper
-- shared by the scripts instead of a copy in each file.
--
-- typed(command, ...): a command that may meet a value of another type: that error (WRONGTYPE,
-- or INCR on a string that is not a number) comes back as a table, which the
-- caller reports. Any other error (an ACL refusal, OOM) is raised, naming the
-- command, instead of passing for a value.
local function typed(command, ...)
  local reply = redis.pcall(command, ...)
  if type(reply) == 'table' and reply.err
      and not string.find(reply.err, 'WRONGTYPE', 1, true)
      and not string.find(reply.err, 'not an integer', 1, true) then
    error(reply.err .. ' (command ' .. command .. ')')
  end
  return reply
end

