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
-- ARGV[8..] pairs: user, qty (user ids contain none of | ; = , " \)
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
-- per key, and one outbox entry (an order message, see message.go, built
-- here by concatenation: no field needs escaping) carries all its orders:
-- that is what lets one call decide hundreds of buyers.
local limit, deadline, campaign, bucket = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local only, ttl, batch = ARGV[5] == '1', ARGV[6], ARGV[7]
local answered = redis.call('HGET', KEYS[6], 'b:' .. batch)
if answered then return answered end
if redis.call('EXISTS', KEYS[8]) == 1 then return string.rep('W', (#ARGV - 7) / 2) end
local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock then return string.rep('X', (#ARGV - 7) / 2) end
local users = {}
for i = 8, #ARGV, 2 do users[#users + 1] = ARGV[i] end
local had = redis.call('HMGET', KEYS[2], unpack(users))

local prefix = campaign .. '-' .. bucket .. '-' .. batch
local quota, changed = {}, {}
local out, rec, msg = {}, {bucket}, {}
local taken = 0
for n = 1, #users do
  local user, qs = users[n], ARGV[7 + 2 * n]
  local qty = tonumber(qs)
  local cur = quota[user] or tonumber(had[n] or '0')
  if cur + qty > limit then
    out[n] = 'L'
  elseif stock - taken < qty and only then
    out[n] = 'S'
  else
    if not quota[user] then changed[#changed + 1] = user end
    quota[user] = cur + qty
    if stock - taken >= qty then
      taken = taken + qty
      -- Numbers are concatenated as the strings they came in or once
      -- converted: a conversion costs more than the rest of a decision.
      local slot = tostring(n - 1)
      rec[#rec + 1] = ';' .. slot .. '=' .. user .. ',' .. qs
      if n == 1 then
        msg[#msg + 1] = '{"id":"' .. prefix .. '","user":"' .. user .. '","qty":' .. qs .. ',"pay_by":' .. deadline .. '}'
      else
        msg[#msg + 1] = '{"id":"' .. prefix .. '.' .. slot .. '","user":"' .. user .. '","qty":' .. qs .. ',"pay_by":' .. deadline .. '}'
      end
      out[n] = 'R'
    else
      out[n] = 'H'
    end
  end
end

out = table.concat(out)
if #changed > 0 then
  local args = {}
  for _, user in ipairs(changed) do
    args[#args + 1] = user
    args[#args + 1] = quota[user]
  end
  redis.call('HSET', KEYS[2], unpack(args))
  redis.call('HSET', KEYS[6], 'b:' .. batch, out)
  redis.call('PEXPIRE', KEYS[6], ttl)
  redis.call('INCR', KEYS[7])
end
if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  redis.call('HSET', KEYS[3], batch, table.concat(rec))
  redis.call('ZADD', KEYS[4], deadline, batch)
  redis.call('XADD', KEYS[5], '*', 'k', campaign .. '-' .. bucket, 'v',
    '{"v":1,"campaign":"' .. campaign .. '","orders":[' .. table.concat(msg, ',') .. ']}')
end
return out
