-- fill: add entries to an open inbox, mark it built, trim it.
-- KEYS[1] inbox
-- ARGV[1] inbox cap, ARGV[2] slack, ARGV[3] 1 to mark the inbox built,
-- ARGV[4..] score, id, score, id, …
-- Returns 0 when the inbox does not exist (expired or lost: nothing
-- written), else 1. Idempotent.
if not redis.call('ZSCORE', KEYS[1], '~') then
  return 0
end
for i = 4, #ARGV, 1000 do
  redis.call('ZADD', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[1], 'XX', 0, '~')
end
local n = redis.call('ZCARD', KEYS[1]) - 1
local cap = tonumber(ARGV[1])
if n > cap + tonumber(ARGV[2]) then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 1, n - cap)
end
return 1
