-- Where a stored value sits in one leaderboard shard.
-- KEYS[1] the shard's sorted set
-- ARGV[1] the stored value v (score and time, see write.lua)
-- ARGV[2] how many entries just above v to return
-- ARGV[3] how many entries just below v to return
-- Returns {count above v, {members equal to v}, {above: member, value, …
-- ascending}, {below: member, value, … descending}}. Members equal to v are
-- ordered by the caller (Redis orders them by member bytes).
local v = ARGV[1]
local na, nb = tonumber(ARGV[2]), tonumber(ARGV[3])
local count = redis.call('ZCOUNT', KEYS[1], '(' .. v, '+inf')
local equal = redis.call('ZRANGEBYSCORE', KEYS[1], v, v)
local above, below = {}, {}
if na > 0 then
  above = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. v, '+inf', 'WITHSCORES', 'LIMIT', 0, na)
end
if nb > 0 then
  below = redis.call('ZREVRANGEBYSCORE', KEYS[1], '(' .. v, '-inf', 'WITHSCORES', 'LIMIT', 0, nb)
end
return {count, equal, above, below}
