-- Make up a missed (or frozen) day with a card: settle the days before
-- today, sign the day, and record its reward and the bonuses the longer run
-- makes due, once each (the ledger's unique key makes a repeat harmless).
-- KEYS and ARGV[1..15] as in days.lua, KEYS[12] the user's card count.
-- ARGV[16] today   ARGV[17] the day to make up (days since 1970-01-01)
-- Returns {status, streak through the run, points, days frozen now…};
-- status 0 ok, -1 no card, -2 the day is already signed; an error when the
-- bucket holds another layout.
local mismatch = open_layout(KEYS[10], ARGV[2], ARGV[1])
if mismatch then return mismatch end
load_state()
local froze = settle(tonumber(ARGV[16]), true)
save_state()
local x = tonumber(ARGV[17])
-- The day is checked before the cards, so a retry of a make-up whose reply
-- was lost (it spent the last card) says "already signed", not "no card".
if signed(x) then return with_days({-2, 0, 0}, froze) end
local cards = tonumber(redis.call('GET', KEYS[12]) or '0')
if cards < 1 then return with_days({-1, 0, 0}, froze) end
redis.call('DECR', KEYS[12])
local streak, points = fill(x, KEYS[11], ARGV[1])
save_state()
return with_days({0, streak, points}, froze)
