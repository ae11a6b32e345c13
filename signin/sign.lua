-- Sign a user in for one day, compute the streak and record the rewards, in
-- one step: the rewards exist if and only if the bit was newly set.
-- KEYS[1..3] the user's bitmaps of the year two before, the year before and
--            the day's year (one bit per day, bit 0 = 1 January)
-- KEYS[4]    the outbox stream of the user's bucket
-- ARGV[1] user   ARGV[2] day offset in its year   ARGV[3] date 'YYYY-MM-DD'
-- ARGV[4] days in the year two before   ARGV[5] days in the year before
-- ARGV[6] daily points   ARGV[7] bonus points   ARGV[8] bonus every N days
-- ARGV[9] expiry of the day's bitmap, ms since the Unix epoch
-- Returns {already signed (0/1), streak, points granted now}.
local off = tonumber(ARGV[2])
local old = redis.call('SETBIT', KEYS[3], off, 1)
local streak = run_back(3, off, {tonumber(ARGV[4]), tonumber(ARGV[5])})
if old == 1 then return {1, streak, 0} end
redis.call('PEXPIREAT', KEYS[3], ARGV[9])
local points = tonumber(ARGV[6])
reward(KEYS[4], ARGV[1], ARGV[3], 'daily', ARGV[6])
if streak % tonumber(ARGV[8]) == 0 then
  reward(KEYS[4], ARGV[1], ARGV[3], 'bonus', ARGV[7])
  points = points + tonumber(ARGV[7])
end
return {0, streak, points}
