-- following: cache a reader's followees (or muted authors), unless a
-- follow, an unfollow, a mute or an unmute happened since they were read
-- from SQL.
-- KEYS[1] following (or muted) set, KEYS[2] the reader's generation counter
-- ARGV[1] generation read before the SQL query ("" for none), ARGV[2] TTL
-- in ms, ARGV[3..] members
-- Returns 1 when written, 0 when the generation moved (read again).
local gen = redis.call('GET', KEYS[2]) or ''
if gen ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('SADD', KEYS[1], '~')
for i = 3, #ARGV, 1000 do
  redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
