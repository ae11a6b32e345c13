-- Pop the members of a delay queue that are due.
-- KEYS[1] the queue: a sorted set of ids scored by due time (ms)
-- ARGV[1] now (ms)
-- ARGV[2] the most to pop
-- Returns the ids popped; each is popped by one caller only.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
