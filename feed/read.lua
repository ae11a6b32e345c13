-- read: one page of a reader's inbox and the accounts they follow, and
-- mark the reader active. Posts fan-out appended to the pushed list are
-- moved into the inbox first.
-- KEYS[1] inbox (sorted set; member "~" scored 0 when built, -1 while building)
-- KEYS[2] following (set of followees plus the marker "~")
-- KEYS[3] pushed (list of "score:id" fan-out appended, after a marker "~")
-- KEYS[4] muted (set of muted authors plus the marker "~")
-- KEYS[5] the view token: a random string that exists only while neither
--         set changed since it was set (every writer of either set drops it)
-- ARGV[1] highest score to return (inclusive, or "+inf"), ARGV[2] how many,
-- ARGV[3] active period in ms (the TTL the keys get), ARGV[4] inbox cap,
-- ARGV[5] slack, ARGV[6] the view token the caller holds the two sets for
-- ("" for none), ARGV[7] a fresh token, set when both sets exist and no
-- token does
-- Returns {inbox state (0 missing, 1 building, 2 built), following exists
-- (0/1; 2: the caller's token holds, the sets are not sent), {id, …},
-- {followee, …}, muted exists (0/1/2), {muted, …}, the token ("" for
-- none)}: ids
-- without their scores, which the caller takes from the posts (Redis 7.0
-- formats a score in a reply at about 0.6 µs). An inbox without its pushed list
-- (lost in a failover) is missing: fan-out could not reach it.
-- The keys' lifetimes are renewed only once they have run down by 1/64 of
-- the active period (one PTTL a read instead of four PEXPIREs), so a
-- reader stays active for at least 63/64 of it after their last read. A
-- missing list or set reads as empty and one that exists never is (each
-- holds its marker), so no EXISTS is needed.
local pushed = redis.call('LRANGE', KEYS[3], 0, -1)
local st = #pushed > 0 and redis.call('ZSCORE', KEYS[1], '~')
local ttl = tonumber(ARGV[3])
local renew = not st or redis.call('PTTL', KEYS[1]) < ttl - math.floor(ttl / 64)
local state, entries = 0, {}
if st then
  if renew then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
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
local tok = redis.call('GET', KEYS[5])
if tok and tok == ARGV[6] then
  if renew then
    -- the sets the token vouches for live as long as it does
    redis.call('PEXPIRE', KEYS[2], ttl)
    redis.call('PEXPIRE', KEYS[4], ttl)
    redis.call('PEXPIRE', KEYS[5], ttl)
  end
  return {state, 2, entries, {}, 2, {}, tok}
end
local following = redis.call('SMEMBERS', KEYS[2])
local have = #following > 0 and 1 or 0
if have == 1 and renew then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local muted = redis.call('SMEMBERS', KEYS[4])
local haveMuted = #muted > 0 and 1 or 0
if haveMuted == 1 and renew then
  redis.call('PEXPIRE', KEYS[4], ttl)
end
if have == 1 and haveMuted == 1 then
  if not tok then
    tok = ARGV[7]
    redis.call('SET', KEYS[5], tok, 'PX', ttl)
  elseif renew then
    redis.call('PEXPIRE', KEYS[5], ttl)
  end
else
  tok = ''
end
return {state, have, entries, following, haveMuted, muted, tok}
