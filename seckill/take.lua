-- Take stock for a buyer (whose quota is held on its home bucket) from
-- another bucket.
-- KEYS[1] stock   KEYS[2] reservations   KEYS[3] due   KEYS[4] outbox
-- ARGV[1] campaign   ARGV[2] reservation id (made by the caller, unique)
-- ARGV[3] user   ARGV[4] qty   ARGV[5] the buyer's home bucket   ARGV[6] deadline ms
-- Returns 1 when the reservation is made — now, or by this same call before
-- its reply was lost — and 0 when this bucket cannot serve qty.
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return 1 end
local qty = tonumber(ARGV[4])
if tonumber(redis.call('GET', KEYS[1]) or '0') < qty then return 0 end
redis.call('DECRBY', KEYS[1], qty)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. '|' .. qty .. '|' .. ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[2])
redis.call('XADD', KEYS[4], '*', 'k', ARGV[1], 'v', cjson.encode({v = 1, campaign = ARGV[1], orders = {{id = ARGV[2], user = ARGV[3], qty = qty, pay_by = tonumber(ARGV[6])}}}))
return 1
