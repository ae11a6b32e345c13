-- Give a buyer's quota back, once per token.
-- KEYS[1] quota hash   KEYS[2] recent (this retry window's hash)
-- KEYS[3] version (bumped by every change, for Reconcile)
-- ARGV[1] user   ARGV[2] qty   ARGV[3] token: the id of the released
-- reservation, or "hold:" and the id a hold that found no stock was made for
-- ARGV[4] TTL of recent, ms
-- Returns 1 if applied now, 0 if the token was applied before (the same call
-- sent again after its reply was lost). Only the caller that closed a
-- reservation or made a hold gives its quota back, so the token needs
-- remembering only for as long as that caller retries.
if redis.call('HSETNX', KEYS[2], 'q:' .. ARGV[3], 1) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if left <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('INCR', KEYS[3])
return 1
