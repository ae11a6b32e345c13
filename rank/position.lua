-- Read one shard around a position: the place of (value, member) in the
-- board's order — greater value first, then, at one value, greater member
-- first (Redis' reverse order) — whether or not that member is on the shard.
-- KEYS[1] the shard's sorted set
-- ARGV[1] the position's value, ARGV[2] its member
-- ARGV[3] how many entries ranked before it to return, ARGV[4] after it
-- Returns {entries ranked before the position, entries with a greater
-- value, the shard's size, up, down}: up is
-- the ARGV[3] entries nearest above it, nearest first, and down the ARGV[4]
-- nearest below it, as flat member, value lists; the member itself is in
-- neither.
-- O(log^2 n): the members at the position's value are searched by index
-- (ZRANGE i i), comparing bytes — Lua's '<' on strings follows the server's
-- locale.
local key, value, member = KEYS[1], ARGV[1], ARGV[2]
local lo, here, below, equal = place(key, value, member) -- order.lua, prepended
local size = redis.call('ZCARD', key)
local up, down = {}, {}
local nUp, nDown = tonumber(ARGV[3]), tonumber(ARGV[4])
if nUp > 0 then
  up = redis.call('ZRANGE', key, lo + here, lo + here + nUp - 1, 'WITHSCORES')
end
if nDown > 0 and lo > 0 then
  local z = redis.call('ZRANGE', key, math.max(0, lo - nDown), lo - 1, 'WITHSCORES')
  for i = #z - 1, 1, -2 do
    down[#down + 1] = z[i]
    down[#down + 1] = z[i + 1]
  end
end
return {size - lo - here, size - below - equal, size, up, down}
