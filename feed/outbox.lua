-- outbox: record a post in its author's outbox and trim it.
-- KEYS[1] the author's outbox (sorted set of post ids by score)
-- KEYS[2] the outbox's version: a token no other write of it uses, which
--         readers that keep the outbox's head in memory check it by
-- ARGV[1] post id, ARGV[2] score, ARGV[3] outbox cap, ARGV[4] slack,
-- ARGV[5] a fresh random token
-- Returns the outbox size. Idempotent (but for the token).
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SET', KEYS[2], ARGV[5])
local n = redis.call('ZCARD', KEYS[1])
local cap = tonumber(ARGV[3])
if n > cap + tonumber(ARGV[4]) then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - cap - 1)
end
return n
