-- Store a snapshot unless another publisher stored one since it was read.
-- KEYS[1] the snapshot hash: at (unix ms of the publish), data (the encoding)
-- ARGV[1] the at of the snapshot the new one was compared with ('' for none)
-- ARGV[2] the new at, ARGV[3] the new data
-- Returns 1 when stored, 0 when the stored snapshot is not ARGV[1]'s.
local at = redis.call('HGET', KEYS[1], 'at') or ''
if at ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'at', ARGV[2], 'data', ARGV[3])
return 1
