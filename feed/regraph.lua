-- regraph: after a follow or an unfollow committed in SQL, drop the
-- reader's cached followees (the next read loads them again) and add the
-- followee's recent posts to, or remove them from, the reader's inbox.
-- KEYS[1] following set, KEYS[2] generation counter, KEYS[3] inbox,
-- KEYS[4] the view token (read.lua), dropped: processes holding the
-- reader's followees in memory read them again
-- ARGV[1] "add" or "remove", ARGV[2] inbox cap, ARGV[3] slack,
-- ARGV[4..] for add: score, id, …; for remove: id, …
-- Returns 1. Safe to run twice (the generation only invalidates).
redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[4])
if #ARGV < 4 or not redis.call('ZSCORE', KEYS[3], '~') then
  return 1
end
local step = 1000
for i = 4, #ARGV, step do
  local last = math.min(i + step - 1, #ARGV)
  if ARGV[1] == 'add' then
    redis.call('ZADD', KEYS[3], unpack(ARGV, i, last))
  else
    redis.call('ZREM', KEYS[3], unpack(ARGV, i, last))
  end
end
local n = redis.call('ZCARD', KEYS[3]) - 1
local cap = tonumber(ARGV[2])
if n > cap + tonumber(ARGV[3]) then
  redis.call('ZREMRANGEBYRANK', KEYS[3], 1, n - cap)
end
return 1
