-- Give a buyer's quota back, once per token.
-- KEYS[1] quota hash   KEYS[2] set of tokens already applied
-- ARGV[1] user   ARGV[2] qty   ARGV[3] token (a reservation id, or a one-off
-- token for a hold that found no stock)
-- Returns 1 if applied now, 0 if the token was applied before.
if redis.call('SADD', KEYS[2], ARGV[3]) == 0 then return 0 end
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if left <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
