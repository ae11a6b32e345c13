-- Take up to ARGV[1] units out of a bucket's stock (reconciliation lowering a
-- stock that Redis overstates).
-- KEYS[1] stock
-- Returns the units taken.
local have = tonumber(redis.call('GET', KEYS[1]) or '0')
local take = math.min(have, tonumber(ARGV[1]))
if take > 0 then redis.call('DECRBY', KEYS[1], take) end
return take
