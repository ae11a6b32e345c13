-- groups: one page of a user's groups, newest-updated first, read atomically.
-- KEYS[1] groups (zset gid -> seq)  KEYS[2] group data (hash)
-- KEYS[3] unseen (zset)             KEYS[4] unread (zset)
-- ARGV[1] the page starts below this seq ('+inf' for the first page), ARGV[2] n
-- Returns a flat list of {gid, seq, json, unseen (0/1), unread (0/1)} per group.
local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i = 1, #ids, 2 do
  local gid = ids[i]
  out[#out + 1] = gid
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], gid) or ''
  out[#out + 1] = redis.call('ZSCORE', KEYS[3], gid) and 1 or 0
  out[#out + 1] = redis.call('ZSCORE', KEYS[4], gid) and 1 or 0
end
return out
