-- The hottest items of one partition under forward decay.
-- KEYS[1] the partition's meta hash (field epoch: the landmark in use)
-- KEYS[2], KEYS[3] the heat sorted sets of even and odd landmarks
-- ARGV[1] how many items
-- Returns {epoch, item, heat, item, heat, …}, hottest first (equal heats:
-- greater name first); {-1} when the partition has no heat yet. Heats are
-- relative to the landmark: the caller scales them.
local e = redis.call('HGET', KEYS[1], 'epoch')
if not e then return {-1} end
local r = redis.call('ZREVRANGE', KEYS[2 + tonumber(e) % 2], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
table.insert(r, 1, tonumber(e))
return r
