-- Shared by the scripts that find a position on one shard; Go prepends it
-- to each of them. A position is (value, member) in Redis' ascending order:
-- smaller value first, then, at one value, smaller member bytes first.
-- less(a, b): byte order of two strings (Lua's '<' follows the server's
-- locale).
-- place(key, value, member): where the position falls on the sorted set
-- key, whether or not member is on it, in O(log^2 n) (the members at the
-- value are searched by index, ZRANGE i i). Returns lo, the number of
-- entries before the position; here, 1 when member is at value on the
-- shard (at index lo), else 0; below, the entries with a smaller value;
-- and equal, the entries at the value. Member '' falls before every
-- member at its value.
local function less(a, b)
  if a == b then return false end
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local function place(key, value, member)
  local below = redis.call('ZCOUNT', key, '-inf', '(' .. value)
  local equal = redis.call('ZCOUNT', key, value, value)
  local lo, hi = below, below + equal
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if less(redis.call('ZRANGE', key, mid, mid)[1], member) then lo = mid + 1 else hi = mid end
  end
  local here = 0
  if lo < below + equal and redis.call('ZRANGE', key, lo, lo)[1] == member then here = 1 end
  return lo, here, below, equal
end
