-- Make up a missed day with a card, and grant the bonuses the longer streak
-- makes due, once each (the ledger's unique key makes a repeat harmless).
-- KEYS[1..4] the user-years of Y-2, Y-1, Y (the missed day's) and Y+1 (a
--            run after the day can reach into it)
-- KEYS[5] the user's card count   KEYS[6] the outbox stream
-- KEYS[7] the bucket's layout key
-- ARGV[1] user   ARGV[2] days in Y-2   ARGV[3] days in Y-1
-- ARGV[4] daily points   ARGV[5] bonus points   ARGV[6] bonus every N days
-- ARGV[7] expiry ms for KEYS[3] and KEYS[4]
-- ARGV[8] the layout ('bitmaps' or 'packed/<hashes per bucket>')
-- ARGV[9..] triples for the missed day and each later day up to today:
--           key index (3 or 4), offset, date 'YYYY-MM-DD'
-- Returns {status, streak through the run, points granted}; status 0 ok,
-- -1 no card, -2 the day is already signed; an error when the bucket holds
-- another layout.
local mismatch = open_layout(KEYS[7], ARGV[8], ARGV[1])
if mismatch then return mismatch end
-- The day is checked before the cards, so a retry of a make-up whose reply
-- was lost (it spent the last card) says "already signed", not "no card".
local gki, goff = tonumber(ARGV[9]), tonumber(ARGV[10])
if isset(load(gki), goff) then return {-2, 0, 0} end
local cards = tonumber(redis.call('GET', KEYS[5]) or '0')
if cards < 1 then return {-1, 0, 0} end
setbit(gki, goff)
redis.call('DECR', KEYS[5])
redis.call('PEXPIREAT', KEYS[gki], ARGV[7])

local lengths = {tonumber(ARGV[2]), tonumber(ARGV[3]), 0}
local before = 0
if goff > 0 then
  before = run_back(gki, goff - 1, lengths)
elseif gki > 1 then
  before = run_back(gki - 1, lengths[gki - 1] - 1, lengths)
end
local every, bonus = tonumber(ARGV[6]), tonumber(ARGV[5])
local points = tonumber(ARGV[4])
reward(KEYS[6], ARGV[1], ARGV[11], 'daily', ARGV[4])
local streak = before
local i = 9
while i + 2 <= #ARGV do
  local ki, k = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if not isset(load(ki), k) then break end
  streak = streak + 1
  if streak % every == 0 then
    reward(KEYS[6], ARGV[1], ARGV[i + 2], 'bonus', ARGV[5])
    points = points + bonus
  end
  i = i + 3
end
return {0, streak, points}
