-- Count, on one shard, the entries ranked before each of several positions
-- (order.lua is prepended). The board's order is Redis' reverse order:
-- greater value first, then greater member.
-- KEYS[1] the shard's sorted set
-- ARGV pairs: a position's value and member
-- Returns, per position, {entries ranked before it, entries with a greater
-- value}, flat; a member at the position itself is in neither.
-- O(log^2 n) per position.
local key = KEYS[1]
local size = redis.call('ZCARD', key)
local out = {}
for i = 1, #ARGV, 2 do
  local lo, here, below, equal = place(key, ARGV[i], ARGV[i + 1])
  out[#out + 1] = size - lo - here
  out[#out + 1] = size - below - equal
end
return out
