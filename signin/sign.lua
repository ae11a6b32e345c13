-- Sign a user in for one day, compute the streak and record the rewards, in
-- one step: the rewards exist if and only if the bit was newly set, so a
-- retry (go-redis resending after a lost reply) finds the bit and records
-- nothing.
-- KEYS[1..3] the user-years of the year two before, the year before and
--            the day's year (one bit per day, bit 0 = 1 January)
-- KEYS[4]    the outbox stream of the user's bucket
-- KEYS[5]    the bucket's layout key
-- ARGV[1] user   ARGV[2] day offset in its year   ARGV[3] date 'YYYY-MM-DD'
-- ARGV[4] days in the year two before   ARGV[5] days in the year before
-- ARGV[6] daily points   ARGV[7] bonus points   ARGV[8] bonus every N days
-- ARGV[9] expiry of the day's user-year, ms since the Unix epoch
-- ARGV[10] the layout ('bitmaps' or 'packed/<hashes per bucket>')
-- Returns {already signed (0/1), streak, points granted now}, or an error
-- when the bucket holds another layout.
local mismatch = open_layout(KEYS[5], ARGV[10], ARGV[1])
if mismatch then return mismatch end
local off = tonumber(ARGV[2])
local old = setbit(3, off)
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
