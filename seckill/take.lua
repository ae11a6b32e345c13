-- Take stock for a buyer (whose quota is held on its home bucket) from
-- another bucket.
-- KEYS[1] stock   KEYS[2] reservations   KEYS[3] due   KEYS[4] outbox   KEYS[5] sequence
-- ARGV[1] campaign   ARGV[2] this bucket   ARGV[3] user   ARGV[4] qty
-- ARGV[5] the buyer's home bucket   ARGV[6] deadline ms
-- Returns the reservation id, or "" when this bucket cannot serve qty.
local qty = tonumber(ARGV[4])
if tonumber(redis.call('GET', KEYS[1]) or '0') < qty then return '' end
redis.call('DECRBY', KEYS[1], qty)
local id = ARGV[1] .. '-' .. ARGV[2] .. '-' .. redis.call('INCR', KEYS[5])
redis.call('HSET', KEYS[2], id, ARGV[3] .. '|' .. qty .. '|' .. ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[6], id)
redis.call('XADD', KEYS[4], '*', 'k', ARGV[1], 'v', cjson.encode({v = 1, campaign = ARGV[1], orders = {{id = id, user = ARGV[3], qty = qty, pay_by = tonumber(ARGV[6])}}}))
return id
