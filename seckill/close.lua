-- Close a reservation on its bucket: remove it and, when ARGV[3] is 1,
-- return its units to the bucket's stock.
-- KEYS[1] stock   KEYS[2] reservations   KEYS[3] due   KEYS[4] recent (this
-- retry window's hash)   KEYS[5] version (bumped by every change, for Reconcile)
-- ARGV[1] reservation id   ARGV[2] call id (random, one per call)
-- ARGV[3] 1 to restock, 0 to only close (paid, or refused by SQL)
-- ARGV[4] TTL of recent, ms
-- Returns "user|qty|home" of the reservation if this call closed it, else "".
-- The call sent again after its reply was lost gets its first answer, so the
-- caller that closed the reservation, and only it, returns the quota.
local done = redis.call('HGET', KEYS[4], 'c:' .. ARGV[2])
if done then return done end
redis.call('ZREM', KEYS[3], ARGV[1])
local r = redis.call('HGET', KEYS[2], ARGV[1])
if not r then return '' end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[3] == '1' then
  local qty = tonumber(string.match(r, '|(%d+)|'))
  redis.call('INCRBY', KEYS[1], qty)
end
redis.call('INCR', KEYS[5])
redis.call('HSET', KEYS[4], 'c:' .. ARGV[2], r)
redis.call('PEXPIRE', KEYS[4], ARGV[4])
return r
