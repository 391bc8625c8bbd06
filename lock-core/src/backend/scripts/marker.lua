-- Prepended to every script that reads the lock key's token or the fence
-- key's value (see mod.rs): the line marker in one place.
--
-- The line marker is a '+' in front of the fence value and of the holder's
-- owner token: someone may wait in line (acquire.lua says when it is
-- written). Owner tokens start with a hex digit and fencing tokens with a
-- decimal one, so the marker is never part of a value.
--
-- unmarked(value): the value without the marker, and whether it had one.
-- Anything else (false for a missing key, an error table) comes back as it
-- is, unmarked.
local function unmarked(value)
  if type(value) == 'string' and string.byte(value, 1) == 43 then
    return string.sub(value, 2), true
  end
  return value, false
end

