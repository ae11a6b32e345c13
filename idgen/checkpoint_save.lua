-- Raise a snowflake node's reservation, never lower it.
-- KEYS[1] reservation key (milliseconds since the Unix epoch, a string)
-- ARGV[1] the new reservation in milliseconds
-- Returns the stored value after the call.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = tonumber(ARGV[1])
if new > cur then
  redis.call('SET', KEYS[1], ARGV[1])
  return new
end
return cur
