-- Decide a batch of purchases on a buyer's home bucket.
-- KEYS[1] stock   KEYS[2] quota (hash user → units bought or held)
-- KEYS[3] reservations (hash id → "user|qty|home")   KEYS[4] due (zset id → deadline ms)
-- KEYS[5] outbox stream
-- ARGV[1] per-user limit   ARGV[2] deadline ms   ARGV[3] campaign   ARGV[4] this bucket
-- ARGV[5..] triples: user, qty, reservation id (made by the caller, unique;
-- user ids contain no '|')
-- Returns one string per triple: its reservation id; "L" (over the user's limit,
-- nothing changed); or "H" (this bucket is empty: the quota is now held for
-- the buyer, who must take the stock from another bucket or give it back).
-- The batch is decided in order in Lua tables and written with one command
-- per key, and one outbox entry (an order message, see message.go) carries all
-- its orders: that is what lets one call decide hundreds of buyers.
local limit, deadline, campaign, bucket = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local users, qtys, ids = {}, {}, {}
for i = 5, #ARGV, 3 do
  users[#users + 1] = ARGV[i]
  qtys[#qtys + 1] = tonumber(ARGV[i + 1])
  ids[#ids + 1] = ARGV[i + 2]
end
local had = redis.call('HMGET', KEYS[2], unpack(users))
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')

local quota, changed = {}, {}
local out, res, due, orders = {}, {}, {}, {}
local taken = 0
for n = 1, #users do
  local user, qty = users[n], qtys[n]
  local cur = quota[user] or tonumber(had[n] or '0')
  if cur + qty > limit then
    out[n] = 'L'
  else
    if not quota[user] then changed[#changed + 1] = user end
    quota[user] = cur + qty
    if stock - taken >= qty then
      taken = taken + qty
      local id = ids[n]
      res[#res + 1] = id
      res[#res + 1] = user .. '|' .. qty .. '|' .. bucket
      due[#due + 1] = deadline
      due[#due + 1] = id
      orders[#orders + 1] = {id = id, user = user, qty = qty, pay_by = deadline}
      out[n] = id
    else
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
end
if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  redis.call('HSET', KEYS[3], unpack(res))
  redis.call('ZADD', KEYS[4], unpack(due))
  redis.call('XADD', KEYS[5], '*', 'k', campaign, 'v', cjson.encode({v = 1, campaign = campaign, orders = orders}))
end
return out
