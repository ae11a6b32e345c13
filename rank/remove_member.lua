-- Remove members from one shard of an EncodingMember board.
-- KEYS[1] the shard's sorted set, KEYS[2] its ties hash (name -> prefix),
-- KEYS[3] its metadata hash
-- ARGV the names
-- Returns the number of members removed.
local prefixes = redis.call('HMGET', KEYS[2], unpack(ARGV))
local gone = {}
for n = 1, #ARGV do
  if prefixes[n] then gone[#gone + 1] = prefixes[n] .. ARGV[n] end
end
local removed = 0
if #gone > 0 then removed = redis.call('ZREM', KEYS[1], unpack(gone)) end
redis.call('HDEL', KEYS[2], unpack(ARGV))
redis.call('HDEL', KEYS[3], unpack(ARGV))
return removed
