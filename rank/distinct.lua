-- List the distinct values above a value on one shard, for Dense ranks.
-- KEYS[1] the shard's sorted set
-- ARGV[1] the value (exclusive), ARGV[2] how many distinct values at most
-- Returns the distinct values greater than ARGV[1], ascending: O(log n)
-- each.
local out = {}
local from = '(' .. ARGV[1]
for _ = 1, tonumber(ARGV[2]) do
  local z = redis.call('ZRANGE', KEYS[1], from, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if #z == 0 then break end
  out[#out + 1] = z[2]
  from = '(' .. z[2]
end
return out
