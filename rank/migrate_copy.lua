-- Copy one chunk of a packed shard into its EncodingMember copy and move
-- the migration's cursor on, atomically.
-- KEYS[1] the shard's sorted set, KEYS[2] its encoding record, KEYS[3] its
-- migration state, KEYS[4] the copy's sorted set, KEYS[5] the copy's ties
-- hash (name -> prefix)
-- ARGV[1] the packed encoding
-- ARGV[2] the cursor this chunk was scanned from; ARGV[3] the cursor after
--         it ('0': the scan is complete)
-- ARGV[4] the keys' absolute expiry in ms, 0 for none
-- ARGV[5..] quadruples: name, its stored value when scanned, its score,
--         its prefix (Epoch + tick, exactly)
-- Returns the number of entries copied, or 'moved' when the cursor is no
-- longer ARGV[2] (another Migrate moved it; nothing is written).
-- An entry whose value changed since the scan, or that is gone, is not
-- copied: the write that changed it wrote the copy too.
local encoding = redis.call('GET', KEYS[2])
if encoding and encoding ~= ARGV[1] then
  return redis.error_reply('rank: encoding mismatch: board written as ' .. encoding .. ', the migration expects ' .. ARGV[1])
end
if redis.call('HGET', KEYS[3], 'phase') ~= 'copying' or redis.call('HGET', KEYS[3], 'cursor') ~= ARGV[2] then
  return 'moved'
end
local names = {}
for i = 5, #ARGV, 4 do names[#names + 1] = ARGV[i] end
local copied = 0
if #names > 0 then
  local now = redis.call('ZMSCORE', KEYS[1], unpack(names))
  local olds = redis.call('HMGET', KEYS[5], unpack(names))
  local gone, add, ties = {}, {}, {}
  for n = 1, #names do
    local i = 5 + (n - 1) * 4
    local name, prefix = ARGV[i], ARGV[i + 3]
    if now[n] and tonumber(now[n]) == tonumber(ARGV[i + 1]) then
      if olds[n] and olds[n] ~= prefix then gone[#gone + 1] = olds[n] .. name end
      add[#add + 1] = ARGV[i + 2]
      add[#add + 1] = prefix .. name
      ties[#ties + 1] = name
      ties[#ties + 1] = prefix
    end
  end
  if #gone > 0 then redis.call('ZREM', KEYS[4], unpack(gone)) end
  if #add > 0 then
    redis.call('ZADD', KEYS[4], unpack(add))
    redis.call('HSET', KEYS[5], unpack(ties))
    copied = #add / 2
    if tonumber(ARGV[4]) > 0 then
      redis.call('PEXPIREAT', KEYS[4], ARGV[4])
      redis.call('PEXPIREAT', KEYS[5], ARGV[4])
    end
  end
end
redis.call('HSET', KEYS[3], 'cursor', ARGV[3])
if ARGV[3] == '0' then redis.call('HSET', KEYS[3], 'phase', 'copied') end
return copied
