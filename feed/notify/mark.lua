-- mark: mark groups seen (ARGV[1] == 'seen') or read and seen ('read'),
-- and return the new counts.
-- KEYS[1] unseen (zset)  KEYS[2] unread (zset)
-- ARGV[1] 'seen' or 'read', ARGV[2..] group ids (none: every group)
-- Returns {unseen, unread}. Ids of no group are ignored. Idempotent.
local read = ARGV[1] == 'read'
if #ARGV == 1 then
  redis.call('DEL', KEYS[1])
  if read then redis.call('DEL', KEYS[2]) end
else
  redis.call('ZREM', KEYS[1], unpack(ARGV, 2))
  if read then redis.call('ZREM', KEYS[2], unpack(ARGV, 2)) end
end
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}
