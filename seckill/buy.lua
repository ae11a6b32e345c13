-- Decide a batch of purchases on the buyers' home bucket.
-- KEYS[1] stock   KEYS[2] quota (hash user → units bought or held)
-- KEYS[3] reservations (hash id → "user|qty|home")   KEYS[4] due (zset id → deadline ms)
-- KEYS[5] outbox stream   KEYS[6] recent (this retry window's hash of holds)
-- KEYS[7] version (bumped by every change, for Reconcile)   KEYS[8] fence (set
-- while Reconcile rebuilds the bucket)
-- ARGV[1] per-user limit   ARGV[2] deadline ms   ARGV[3] campaign   ARGV[4] this bucket
-- ARGV[5] 1 if this is the campaign's only bucket   ARGV[6] TTL of recent, ms
-- ARGV[7..] triples: user, qty, reservation id (made by the caller, unique;
-- user ids contain no '|')
-- Returns one letter per triple: R (reserved under its id); L (over the
-- user's limit, nothing changed); S (sold out, nothing changed: only bucket);
-- H (this bucket is empty: the quota is now held for the buyer, who must take
-- the stock from another bucket or give it back); or, for all, nothing
-- changed: W (Reconcile is rebuilding the bucket: wait) or X (the bucket has
-- no stock key: Redis lost its state until Reconcile rebuilds it).
-- A call sent again after its reply was lost answers as the first did: its
-- reservations are found under their ids, its holds in recent (the caller's
-- retries fall within recent's TTL, and a reservation is never released that
-- soon). Other answers changed nothing, so deciding them again is harmless.
-- The batch is decided in order in Lua tables and written with one command
-- per key, and one outbox entry (an order message, see message.go) carries all
-- its orders: that is what lets one call decide hundreds of buyers.
local limit, deadline, campaign, bucket = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local only, ttl = ARGV[5] == '1', ARGV[6]
local users, qtys, ids = {}, {}, {}
for i = 7, #ARGV, 3 do
  users[#users + 1] = ARGV[i]
  qtys[#qtys + 1] = tonumber(ARGV[i + 1])
  ids[#ids + 1] = ARGV[i + 2]
end
if redis.call('EXISTS', KEYS[8]) == 1 then return string.rep('W', #users) end
local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock then return string.rep('X', #users) end
local had = redis.call('HMGET', KEYS[2], unpack(users))

local quota, changed = {}, {}
local out, res, due, orders, holds = {}, {}, {}, {}, {}
local taken = 0
for n = 1, #users do
  local user, qty, id = users[n], qtys[n], ids[n]
  local cur = quota[user] or tonumber(had[n] or '0')
  if redis.call('HEXISTS', KEYS[3], id) == 1 then
    out[n] = 'R'
  elseif redis.call('HEXISTS', KEYS[6], id) == 1 then
    out[n] = 'H'
  elseif cur + qty > limit then
    out[n] = 'L'
  elseif stock - taken < qty and only then
    out[n] = 'S'
  else
    if not quota[user] then changed[#changed + 1] = user end
    quota[user] = cur + qty
    if stock - taken >= qty then
      taken = taken + qty
      res[#res + 1] = id
      res[#res + 1] = user .. '|' .. qty .. '|' .. bucket
      due[#due + 1] = deadline
      due[#due + 1] = id
      orders[#orders + 1] = {id = id, user = user, qty = qty, pay_by = deadline}
      out[n] = 'R'
    else
      holds[#holds + 1] = id
      holds[#holds + 1] = qty
      out[n] = 'H'
    end
  end
end

if #changed > 0 then
  local args = {}
  for _, user in ipairs(changed) do
    args[#args + 1] = user
    args[#args + 1] = quota[user]
  end
  redis.call('HSET', KEYS[2], unpack(args))
  redis.call('INCR', KEYS[7])
end
if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  redis.call('HSET', KEYS[3], unpack(res))
  redis.call('ZADD', KEYS[4], unpack(due))
  redis.call('XADD', KEYS[5], '*', 'k', campaign .. '-' .. bucket, 'v', cjson.encode({v = 1, campaign = campaign, orders = orders}))
end
if #holds > 0 then
  redis.call('HSET', KEYS[6], unpack(holds))
  redis.call('PEXPIRE', KEYS[6], ttl)
end
return table.concat(out)
