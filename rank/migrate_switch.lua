-- Switch one shard to its EncodingMember copy, atomically: the copy
-- becomes the shard's sorted set and ties hash, the record says
-- EncodingMember, the migration state goes.
-- KEYS[1] the shard's sorted set, KEYS[2] its ties hash, KEYS[3] its
-- encoding record, KEYS[4] its migration state, KEYS[5] the copy's sorted
-- set, KEYS[6] the copy's ties hash
-- ARGV[1] the packed encoding, ARGV[2] the member encoding
-- Returns 'switched'; 'done' when it already was; 'copying' when the copy
-- is not complete; 'rescan' when the copy's size is not the shard's (a
-- scan missed some, as SCAN may across a restart): the copy is emptied and
-- starts again from cursor 0, and nothing is switched. An error when the
-- shard was written in another encoding.
-- The copy never holds a name the shard lacks (every write and removal is
-- written to both), so equal sizes mean equal entries.
local encoding = redis.call('GET', KEYS[3])
if encoding == ARGV[2] then return 'done' end
if encoding and encoding ~= ARGV[1] then
  return redis.error_reply('rank: encoding mismatch: board written as ' .. encoding .. ', the migration expects ' .. ARGV[1])
end
if redis.call('HGET', KEYS[4], 'phase') ~= 'copied' then return 'copying' end
if redis.call('ZCARD', KEYS[1]) ~= redis.call('ZCARD', KEYS[5]) then
  redis.call('DEL', KEYS[5], KEYS[6])
  redis.call('HSET', KEYS[4], 'phase', 'copying', 'cursor', '0')
  return 'rescan'
end
redis.call('UNLINK', KEYS[1], KEYS[2])
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('RENAME', KEYS[5], KEYS[1]) end
if redis.call('EXISTS', KEYS[6]) == 1 then redis.call('RENAME', KEYS[6], KEYS[2]) end
if encoding then
  redis.call('SET', KEYS[3], ARGV[2], 'KEEPTTL')
else
  redis.call('SET', KEYS[3], ARGV[2])
end
redis.call('DEL', KEYS[4])
return 'switched'
