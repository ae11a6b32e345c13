-- add: apply one activity to its target's notification groups, once.
-- KEYS[1] dedupe key of the activity id   KEYS[2] groups (zset gid -> seq)
-- KEYS[3] group data (hash gid -> json)   KEYS[4] unseen (zset)  KEYS[5] unread (zset)
-- KEYS[6] sequence counter                KEYS[7] actor set of the activity's group
-- KEYS[8] actor set of the group the caller expects to drop (any key of the user if none)
-- ARGV[1] dedupe TTL ms, ARGV[2] group id, ARGV[3] actor, ARGV[4] time (unix ms),
-- ARGV[5] cap, ARGV[6] max actors kept, ARGV[7] group id KEYS[8] belongs to ("" if none)
-- Returns {0} for a duplicate (nothing changed), {1} when applied, or
-- {2, gid}: the user is at cap and the oldest group is gid, not ARGV[7];
-- call again with gid's actor set (a group dropped on the way stays dropped).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0}
end
local gid, t, cap = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local raw = redis.call('HGET', KEYS[3], gid)
local g
if raw then
  g = cjson.decode(raw)
else
  local n = redis.call('ZCARD', KEYS[2])
  while n >= cap do
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if oldest ~= ARGV[7] then
      return {2, oldest}
    end
    redis.call('ZREM', KEYS[2], oldest)
    redis.call('ZREM', KEYS[4], oldest)
    redis.call('ZREM', KEYS[5], oldest)
    redis.call('HDEL', KEYS[3], oldest)
    redis.call('DEL', KEYS[8])
    n = n - 1
    ARGV[7] = ''
  end
  g = {n = 0, a = {}, f = ARGV[4], l = ARGV[4]}
end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
if redis.call('SADD', KEYS[7], ARGV[3]) == 1 then
  g.n = g.n + 1
  if #g.a < tonumber(ARGV[6]) then
    g.a[#g.a + 1] = ARGV[3]
  end
end
if t < tonumber(g.f) then g.f = ARGV[4] end
if t > tonumber(g.l) then g.l = ARGV[4] end
local seq = redis.call('INCR', KEYS[6])
redis.call('ZADD', KEYS[2], seq, gid)
redis.call('ZADD', KEYS[4], seq, gid)
redis.call('ZADD', KEYS[5], seq, gid)
redis.call('HSET', KEYS[3], gid, cjson.encode(g))
return {1}
