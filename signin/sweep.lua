-- Settle the days before today: spend the freezes the missed ones take.
-- KEYS and ARGV[1..15] as in days.lua; KEYS[12] unused. ARGV[16] today.
-- Returns the days frozen now; an error when the bucket holds another
-- layout.
local mismatch = open_layout(KEYS[10], ARGV[2], ARGV[1])
if mismatch then return mismatch end
load_state()
local froze = settle(tonumber(ARGV[16]), true)
save_state()
return with_days({}, froze)
