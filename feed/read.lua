-- read: one page of a reader's inbox and the accounts they follow, and
-- mark the reader active. Posts fan-out appended to the pushed list are
-- moved into the inbox first.
-- KEYS[1] inbox (sorted set; member "~" scored 0 when built, -1 while building)
-- KEYS[2] following (set of followees plus the marker "~")
-- KEYS[3] pushed (list of "score:id" fan-out appended, after a marker "~")
-- KEYS[4] muted (set of muted authors plus the marker "~")
-- ARGV[1] highest score to return (inclusive, or "+inf"), ARGV[2] how many,
-- ARGV[3] active period in ms (the TTL the keys get), ARGV[4] inbox cap,
-- ARGV[5] slack
-- Returns {inbox state (0 missing, 1 building, 2 built), following exists
-- (0/1), {id, …}, {followee, …}, muted exists (0/1), {muted, …}}: ids
-- without their scores, which the caller takes from the posts (Redis 7.0
-- formats a score in a reply at about 0.6 µs). An inbox without its pushed list
-- (lost in a failover) is missing: fan-out could not reach it.
local st = redis.call('ZSCORE', KEYS[1], '~')
local state, entries, following, have = 0, {}, {}, 0
if st and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  local pushed = redis.call('LRANGE', KEYS[3], 0, -1)
  -- a push that trimmed the list dropped the marker with the oldest entries
  if #pushed > 1 or pushed[1] ~= '~' then
    local args = {}
    for _, v in ipairs(pushed) do
      local score, id = string.match(v, '^(%d+):(%d+)$')
      if score then
        args[#args + 1] = score
        args[#args + 1] = id
      end
      if #args >= 1000 then
        redis.call('ZADD', KEYS[1], unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', KEYS[1], unpack(args))
    end
    redis.call('LTRIM', KEYS[3], 0, 0)
    redis.call('LSET', KEYS[3], 0, '~')
    local n = redis.call('ZCARD', KEYS[1]) - 1
    local cap = tonumber(ARGV[4])
    if n > cap + tonumber(ARGV[5]) then
      -- rank 0 is the marker; ranks 1..n-cap are the oldest entries
      redis.call('ZREMRANGEBYRANK', KEYS[1], 1, n - cap)
    end
  end
  if tonumber(st) == 0 then
    state = 2
    entries = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '(0', 'LIMIT', 0, ARGV[2])
  else
    state = 1
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  have = 1
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  following = redis.call('SMEMBERS', KEYS[2])
end
local muted, haveMuted = {}, 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  haveMuted = 1
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
  muted = redis.call('SMEMBERS', KEYS[4])
end
return {state, have, entries, following, haveMuted, muted}
