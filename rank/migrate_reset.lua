-- Start one shard's copy again from nothing, atomically: writes landing
-- after it write the empty copy, and the scan restarts at cursor 0.
-- KEYS[1] the shard's migration state, KEYS[2] and KEYS[3] the copy's
-- sorted set and ties hash
redis.call('DEL', KEYS[2], KEYS[3])
return redis.call('HSET', KEYS[1], 'phase', 'copying', 'cursor', '0')
