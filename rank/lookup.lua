-- Find a member on one shard of an EncodingMember board.
-- KEYS[1] the shard's sorted set, KEYS[2] its ties hash (name -> prefix)
-- ARGV[1] the name
-- Returns nil when the member is absent, else {stored member, stored value,
-- its index in reverse order (entries ranked before it on the shard), the
-- shard's size, the shard's entries with a greater value}.
local prefix = redis.call('HGET', KEYS[2], ARGV[1])
if not prefix then return nil end
local key = prefix .. ARGV[1]
local value = redis.call('ZSCORE', KEYS[1], key)
if not value then return nil end
return {key, value, redis.call('ZREVRANK', KEYS[1], key), redis.call('ZCARD', KEYS[1]),
  redis.call('ZCOUNT', KEYS[1], '(' .. value, '+inf')}
