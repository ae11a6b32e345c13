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
local function less(a, b)
  if a == b then return false end
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local below = redis.call('ZCOUNT', key, '-inf', '(' .. value)
local equal = redis.call('ZCOUNT', key, value, value)
-- lo: the first index, in ascending order, of the members at the value
-- not less than member.
local lo, hi = below, below + equal
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if less(redis.call('ZRANGE', key, mid, mid)[1], member) then lo = mid + 1 else hi = mid end
end
local here = 0
if lo < below + equal and redis.call('ZRANGE', key, lo, lo)[1] == member then here = 1 end
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
