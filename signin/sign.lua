-- Sign a user in for one day: settle the days before it (freezes), set the
-- day's bit, update the streak state and record the rewards, in one step.
-- The rewards exist if and only if the bit was newly set, so a retry
-- (go-redis resending after a lost reply) finds the bit and records nothing,
-- and settling twice freezes nothing twice.
-- KEYS and ARGV[1..15] as in days.lua; KEYS[12] unused (the user's state
-- again). ARGV[16] the day signed (days since 1970-01-01).
-- Returns {status, streak, points, days frozen now…}: status 0 signed, 1
-- already signed; an error when the bucket holds another layout.
local mismatch = open_layout(KEYS[10], ARGV[2], ARGV[1])
if mismatch then return mismatch end
load_state()
local d = tonumber(ARGV[16])
local froze = settle(d, true)
if signed(d) then
  save_state()
  return with_days({1, streak_at(d), 0}, froze)
end
local streak, points = fill(d, KEYS[11], ARGV[1])
save_state()
return with_days({0, streak, points}, froze)
