-- Remove the entries between two positions from one shard, with the
-- fields of their names in the ties and metadata hashes, atomically
-- (order.lua is prepended).
-- KEYS[1] the shard's sorted set, KEYS[2] its ties hash (name -> prefix;
-- written only when ARGV[5] > 0), KEYS[3] its metadata hash
-- ARGV[1], ARGV[2] the lowest position removed, in Redis' ascending order:
--   value and member; member '' means from the first member at the value
-- ARGV[3], ARGV[4] the highest position removed; member '' means through
--   the last member at the value
-- ARGV[5] the length of the tie-break prefix before each name in a stored
--   member (8; 0 on a packed board, whose stored member is the name)
-- Returns the number of entries removed.
-- O(log^2 n + k) for k removed; the names are read 1,000 at a time (unpack
-- has a limit), the sorted set trimmed with one ZREMRANGEBYRANK.
local key = KEYS[1]
local first = place(key, ARGV[1], ARGV[2])
local stop -- one past the last index removed
if ARGV[4] == '' then
  stop = redis.call('ZCOUNT', key, '-inf', ARGV[3])
else
  local lo, here = place(key, ARGV[3], ARGV[4])
  stop = lo + here
end
if stop <= first then return 0 end
local skip = tonumber(ARGV[5])
for from = first, stop - 1, 1000 do
  local names = redis.call('ZRANGE', key, from, math.min(from + 999, stop - 1))
  for i = 1, #names do names[i] = string.sub(names[i], skip + 1) end
  if skip > 0 then redis.call('HDEL', KEYS[2], unpack(names)) end
  redis.call('HDEL', KEYS[3], unpack(names))
end
redis.call('ZREMRANGEBYRANK', key, first, stop - 1)
return stop - first
