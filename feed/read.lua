-- read: one page of a reader's inbox and the accounts they follow, and
-- mark the reader active.
-- KEYS[1] inbox (sorted set; member "~" scored 0 when built, -1 while building)
-- KEYS[2] following (set of followees plus the marker "~")
-- ARGV[1] highest score to return (inclusive, or "+inf"), ARGV[2] how many,
-- ARGV[3] active period in ms (the TTL both keys get)
-- Returns {inbox state (0 missing, 1 building, 2 built), following exists
-- (0/1), {id, score, …}, {followee, …}}.
local st = redis.call('ZSCORE', KEYS[1], '~')
local state, entries, following, have = 0, {}, {}, 0
if st then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  if tonumber(st) == 0 then
    state = 2
    entries = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '(0', 'WITHSCORES', 'LIMIT', 0, ARGV[2])
  else
    state = 1
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  have = 1
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  following = redis.call('SMEMBERS', KEYS[2])
end
return {state, have, entries, following}
