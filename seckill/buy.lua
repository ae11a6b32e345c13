-- Decide a batch of purchases on the buyers' home bucket.
-- KEYS[1] stock   KEYS[2] quota (hash user → units bought or held)
-- KEYS[3] reservations (hash batch number → record, see below)
-- KEYS[4] due (zset batch number → deadline ms)   KEYS[5] outbox stream
-- KEYS[6] recent (this retry window's hash of batch answers)
-- KEYS[7] version (bumped by every change, for Reconcile)   KEYS[8] fence (set
-- while Reconcile rebuilds the bucket)
-- ARGV[1] per-user limit   ARGV[2] deadline ms   ARGV[3] campaign   ARGV[4] this bucket
-- ARGV[5] 1 if this is the campaign's only bucket   ARGV[6] TTL of recent, ms
-- ARGV[7] batch number (made by the caller, unique)
-- ARGV[8], ARGV[9] the batch's record and order message as they would be if
-- every buyer were reserved, built by the caller (see allReserved in buy.go)
-- ARGV[10..] pairs: user, qty (user ids contain none of | ; = , " \)
-- Returns one letter per pair: R (reserved, as slot i of the batch: id
-- "<campaign>-<bucket>-<batch>" for slot 0, "…-<batch>.<i>" after); L (over
-- the user's limit, nothing changed); S (sold out, nothing changed: only
-- bucket); H (this bucket is empty: the quota is now held for the buyer, who
-- must take the stock from another bucket or give it back); or, for all,
-- nothing changed: W (Reconcile is rebuilding the bucket: wait) or X (the
-- bucket has no stock key: Redis lost its state until Reconcile rebuilds it).
-- The batch's reservations are one record, "<home>" then ";<slot>=<user>,<qty>"
-- per open reservation, with one deadline in due: close.lua removes a slot,
-- and the record and its deadline go with the last.
-- A call sent again after its reply was lost answers as the first did: a
-- batch that changed anything leaves its answers in recent under its number
-- (the caller's retries fall within recent's TTL). Other answers changed
-- nothing, so deciding them again is harmless.
-- The batch is decided in order in Lua tables and written with one command
-- per key, and one outbox entry (an order message, see message.go) carries
-- all its orders: that is what lets one call decide hundreds of buyers. What
-- a decision costs here is mostly the Lua objects made for it, so the usual
-- batch (new buyers, all reserved) makes none of its own: its quotas are the
-- pairs as sent, its record and message the caller's. Another batch writes
-- the quotas it computed, and cuts its record and message out of the
-- caller's, one slice per run of reservations.
local limit, deadline, campaign, bucket = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local only, ttl, batch = ARGV[5] == '1', ARGV[6], ARGV[7]
local buyers = (#ARGV - 9) / 2
local answered = redis.call('HGET', KEYS[6], 'b:' .. batch)
if answered then return answered end
if redis.call('EXISTS', KEYS[8]) == 1 then return string.rep('W', buyers) end
local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock then return string.rep('X', buyers) end
local users = {}
for n = 1, buyers do users[n] = ARGV[8 + 2 * n] end
local had = redis.call('HMGET', KEYS[2], unpack(users))

-- quota: a user's units after this batch's earlier decisions; after[n]: the
-- quota to write for buyer n (its qty as sent when the user had none).
-- plain: every buyer new, once, and granted; all: every buyer reserved.
local quota, after, out = {}, {}, {}
local taken, changed, plain, all = 0, false, true, true
for n = 1, buyers do
  local user, qs = users[n], ARGV[9 + 2 * n]
  local qty = 1
  if qs ~= '1' then qty = tonumber(qs) end -- a conversion costs more than the rest of a decision
  local cur = quota[user]
  if cur then
    plain = false
  elseif had[n] then
    cur, plain = tonumber(had[n]), false
  else
    cur = 0
  end
  if cur + qty > limit then
    out[n], plain, all = 'L', false, false
  elseif stock - taken < qty and only then
    out[n], plain, all = 'S', false, false
  else
    changed = true
    quota[user] = cur + qty
    if cur == 0 then after[n] = qs else after[n] = cur + qty end
    if stock - taken >= qty then
      taken = taken + qty
      out[n] = 'R'
    else
      out[n], all = 'H', false
    end
  end
end
out = table.concat(out)

-- Cut before any write, so that strings not matching the pairs fail the
-- call having changed nothing.
local rec, msg = ARGV[8], ARGV[9]
if taken > 0 and not all then
  local id = '{"id":"' .. campaign .. '-' .. bucket .. '-' .. batch
  local fr, fm = 1, 1
  -- where slot k's entries start in rec and msg (searched from fr and fm)
  local function start(k)
    if k == buyers then return #rec + 1, #msg end
    if k == 0 then return string.find(rec, ';0=', 1, true), string.find(msg, id .. '"', 1, true) end
    return string.find(rec, ';' .. k .. '=', fr, true), string.find(msg, id .. '.' .. k .. '"', fm, true)
  end
  local r, m = {string.match(rec, '^%d+')}, {}
  local n = 1
  while n <= buyers do
    if string.byte(out, n) == 82 then -- 'R': slots n-1 .. j-2 are one run
      local j = n + 1
      while j <= buyers and string.byte(out, j) == 82 do j = j + 1 end
      local rs, ms = start(n - 1)
      fr, fm = rs, ms
      local re, me = start(j - 1)
      r[#r + 1], m[#m + 1] = string.sub(rec, rs, re - 1), string.sub(msg, ms, me - 2)
      fr, fm, n = re, me, j
    else
      n = n + 1
    end
  end
  rec = table.concat(r)
  msg = '{"v":1,"campaign":"' .. campaign .. '","orders":[' .. table.concat(m, ',') .. ']}'
end

if changed then
  if plain then
    redis.call('HSET', KEYS[2], unpack(ARGV, 10, #ARGV))
  else
    local args, at = {}, {} -- one pair per user: its last decision holds its quota
    for n = 1, buyers do
      if after[n] then
        local user = users[n]
        local i = at[user]
        if not i then
          i = #args + 2
          at[user], args[i - 1] = i, user
        end
        args[i] = after[n]
      end
    end
    redis.call('HSET', KEYS[2], unpack(args))
  end
  redis.call('HSET', KEYS[6], 'b:' .. batch, out)
  redis.call('PEXPIRE', KEYS[6], ttl)
  redis.call('INCR', KEYS[7])
end
if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  redis.call('HSET', KEYS[3], batch, rec)
  redis.call('ZADD', KEYS[4], deadline, batch)
  redis.call('XADD', KEYS[5], '*', 'k', campaign .. '-' .. bucket, 'v', msg)
end
return out
