-- Set days of one user-year from a backup (days already set stay set).
-- KEYS[1] the user-year   KEYS[2] the bucket's layout key
-- ARGV[1] user   ARGV[2] the layout   ARGV[3] expiry ms of KEYS[1]
-- ARGV[4..] offsets of the days to set
-- Returns 0, or an error when the bucket holds another layout.
local mismatch = open_layout(KEYS[2], ARGV[2], ARGV[1])
if mismatch then return mismatch end
for i = 4, #ARGV do setbit(1, tonumber(ARGV[i])) end
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 0
