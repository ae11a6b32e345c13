-- Remove the entries between two positions from one shard, with the
-- fields of their names in the ties and metadata hashes, atomically
-- (order.lua is prepended).
-- KEYS[1] the shard's sorted set, KEYS[2] its ties hash (name -> prefix;
-- written only when ARGV[5] > 0), KEYS[3] its metadata hash, KEYS[4] its
-- encoding record, KEYS[5] and KEYS[6] the sorted set and ties hash of the
-- copy a Migrate may be making of a packed shard (the names removed are
-- removed there too)
-- ARGV[1], ARGV[2] the lowest position removed, in Redis' ascending order:
--   value and member; member '' means from the first member at the value
-- ARGV[3], ARGV[4] the highest position removed; member '' means through
--   the last member at the value
-- ARGV[5] the length of the tie-break prefix before each name in a stored
--   member (8; 0 on a packed board, whose stored member is the name)
-- ARGV[6] the remover's encoding
-- Returns the number of entries removed; an error when the shard was
-- written in another encoding.
-- O(log^2 n + k) for k removed; the names are read 1,000 at a time (unpack
-- has a limit), the sorted set trimmed with one ZREMRANGEBYRANK.
local encoding = redis.call('GET', KEYS[4])
if encoding and encoding ~= ARGV[6] then
  return redis.error_reply('rank: encoding mismatch: board written as ' .. encoding .. ', this remover uses ' .. ARGV[6])
end
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
  if skip > 0 then
    redis.call('HDEL', KEYS[2], unpack(names))
  else
    local prefixes = redis.call('HMGET', KEYS[6], unpack(names))
    local gone = {}
    for n = 1, #names do
      if prefixes[n] then gone[#gone + 1] = prefixes[n] .. names[n] end
    end
    if #gone > 0 then
      redis.call('ZREM', KEYS[5], unpack(gone))
      redis.call('HDEL', KEYS[6], unpack(names))
    end
  end
  redis.call('HDEL', KEYS[3], unpack(names))
end
redis.call('ZREMRANGEBYRANK', key, first, stop - 1)
return stop - first
