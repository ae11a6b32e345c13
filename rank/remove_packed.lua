-- Remove members from one shard of an EncodingPacked board, and from the
-- copy a Migrate may be making of it.
-- KEYS[1] the shard's sorted set (members are the names), KEYS[2] its
-- metadata hash, KEYS[3] its encoding record, KEYS[4] and KEYS[5] the
-- copy's sorted set and ties hash (name -> prefix)
-- ARGV[1] the remover's encoding, ARGV[2..] the names
-- Returns the number of members removed; an error when the shard was
-- written in another encoding.
local encoding = redis.call('GET', KEYS[3])
if encoding and encoding ~= ARGV[1] then
  return redis.error_reply('rank: encoding mismatch: board written as ' .. encoding .. ', this remover uses ' .. ARGV[1])
end
local names = {}
for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
local removed = redis.call('ZREM', KEYS[1], unpack(names))
redis.call('HDEL', KEYS[2], unpack(names))
local prefixes = redis.call('HMGET', KEYS[5], unpack(names))
local gone = {}
for n = 1, #names do
  if prefixes[n] then gone[#gone + 1] = prefixes[n] .. names[n] end
end
if #gone > 0 then
  redis.call('ZREM', KEYS[4], unpack(gone))
  redis.call('HDEL', KEYS[5], unpack(names))
end
return removed
