-- Take stock for a buyer (whose quota is held on its home bucket) from
-- another bucket, as a batch of one.
-- KEYS[1] stock   KEYS[2] reservations   KEYS[3] due   KEYS[4] outbox
-- KEYS[5] version (bumped by every change, for Reconcile)   KEYS[6] fence (set
-- while Reconcile rebuilds the bucket)
-- ARGV[1] campaign   ARGV[2] batch number (made by the caller, unique)
-- ARGV[3] user   ARGV[4] qty   ARGV[5] the buyer's home bucket   ARGV[6] deadline ms
-- ARGV[7] this bucket
-- The reservation id is "<campaign>-<bucket>-<batch>", its record (see
-- buy.lua) "<home>;0=<user>,<qty>".
-- Returns 1 when the reservation is made — now, or by this same call before
-- its reply was lost — 0 when this bucket cannot serve qty, and -1 when it
-- may but its state is lost or being rebuilt.
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return 1 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock or redis.call('EXISTS', KEYS[6]) == 1 then return -1 end
local qty = tonumber(ARGV[4])
if stock < qty then return 0 end
local key = ARGV[1] .. '-' .. ARGV[7]
redis.call('DECRBY', KEYS[1], qty)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[5] .. ';0=' .. ARGV[3] .. ',' .. qty)
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[2])
redis.call('XADD', KEYS[4], '*', 'k', key, 'v', cjson.encode({v = 1, campaign = ARGV[1], orders = {{id = key .. '-' .. ARGV[2], user = ARGV[3], qty = qty, pay_by = tonumber(ARGV[6])}}}))
redis.call('INCR', KEYS[5])
return 1
