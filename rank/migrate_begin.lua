-- Start (or find) the migration of one shard from EncodingPacked to
-- EncodingMember.
-- KEYS[1] the shard's encoding record, KEYS[2] its migration state (a
-- hash: phase 'copying' or 'copied', cursor the ZSCAN cursor reached)
-- ARGV[1] the packed encoding, ARGV[2] the member encoding, ARGV[3] the
-- keys' absolute expiry in ms, 0 for none
-- Returns {'done', '0'} for a shard already switched, else {phase,
-- cursor}; an error when the shard was written in another encoding.
-- From the moment the state exists, every write to the shard is also
-- written to the copy (write.lua, remove_packed.lua, remove_range.lua).
local encoding = redis.call('GET', KEYS[1])
if encoding == ARGV[2] then return {'done', '0'} end
if encoding and encoding ~= ARGV[1] then
  return redis.error_reply('rank: encoding mismatch: board written as ' .. encoding .. ', the migration expects ' .. ARGV[1])
end
redis.call('HSETNX', KEYS[2], 'phase', 'copying')
redis.call('HSETNX', KEYS[2], 'cursor', '0')
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIREAT', KEYS[2], ARGV[3]) end
return redis.call('HMGET', KEYS[2], 'phase', 'cursor')
