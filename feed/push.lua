-- push: add one post to one reader's inbox, if the reader is active.
-- KEYS[1] the reader's inbox (sorted set; the member "~" marks that it exists)
-- ARGV[1] post id, ARGV[2] score, ARGV[3] inbox cap, ARGV[4] slack
-- Returns 1 when added, 0 when the reader has no inbox (inactive: skipped).
-- Idempotent: adding the same post again changes nothing.
if not redis.call('ZSCORE', KEYS[1], '~') then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local n = redis.call('ZCARD', KEYS[1]) - 1
local cap = tonumber(ARGV[3])
if n > cap + tonumber(ARGV[4]) then
  -- rank 0 is the marker; ranks 1..n-cap are the oldest entries
  redis.call('ZREMRANGEBYRANK', KEYS[1], 1, n - cap)
end
return 1
