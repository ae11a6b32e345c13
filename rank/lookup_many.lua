-- Find several members on one shard.
-- KEYS[1] the shard's sorted set, KEYS[2] its ties hash (name -> prefix;
-- read only when ARGV[1] is 'member')
-- ARGV[1] the encoding: 'member' (the stored member is prefix .. name) or
-- 'packed' (the stored member is the name)
-- ARGV[2..] the names
-- Returns, per name, {stored member, stored value} flat, both '' when the
-- name is not on the shard.
local stored = {}
for i = 2, #ARGV do stored[i - 1] = ARGV[i] end
if ARGV[1] == 'member' then
  local prefixes = redis.call('HMGET', KEYS[2], unpack(stored))
  for n = 1, #stored do
    if prefixes[n] then stored[n] = prefixes[n] .. stored[n] else stored[n] = false end
  end
end
local present = {}
for n = 1, #stored do
  if stored[n] then present[#present + 1] = stored[n] end
end
local values = {}
if #present > 0 then values = redis.call('ZMSCORE', KEYS[1], unpack(present)) end
local out, j = {}, 0
for n = 1, #stored do
  local key, value = '', ''
  if stored[n] then
    j = j + 1
    if values[j] then key, value = stored[n], values[j] end
  end
  out[#out + 1] = key
  out[#out + 1] = value
end
return out
