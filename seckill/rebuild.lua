-- Rebuild one bucket from the record (Reconcile with repair), unless the
-- bucket changed since it was read, and lift its fence.
-- KEYS[1] stock   KEYS[2] quota   KEYS[3] reservations   KEYS[4] due
-- KEYS[5] version (bumped by every change)   KEYS[6] fence (holding off new
-- purchases while the bucket is read and rebuilt)
-- ARGV[1] the version read   ARGV[2] the bucket's stock
-- ARGV[3] JSON {"res":{batch:record},"due":{batch:deadline ms},"quota":{user:units}}:
-- the bucket's open reservations (SQL's pending orders and the reservations
-- still in flight to SQL) as batch records (see buy.lua), and for the users
-- homed here the units their orders and open reservations hold
-- Returns 1 when rebuilt, 0 when the bucket changed since it was read (read
-- again). Quotas are only raised: a quota above what a user's orders explain
-- is a hold in flight (or one a crashed process left), which costs that user
-- a try, never a unit.
if (redis.call('GET', KEYS[5]) or '0') ~= ARGV[1] then return 0 end
local want = cjson.decode(ARGV[3])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[3], KEYS[4])
-- put writes a table with one command per 500 pairs (unpack has a limit).
-- (No swap of the loop variables for ZADD's score-first order: gopher-lua,
-- under miniredis, assigns k, v = v, k as k = v, v = v.)
local function put(cmd, key, t, scoreFirst)
  local args = {}
  for k, v in pairs(t) do
    local first, second = k, v
    if scoreFirst then first, second = v, k end
    args[#args + 1] = first
    args[#args + 1] = second
    if #args == 1000 then
      redis.call(cmd, key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call(cmd, key, unpack(args)) end
end
put('HSET', KEYS[3], want.res, false)
put('ZADD', KEYS[4], want.due, true)
for user, units in pairs(want.quota) do
  if tonumber(redis.call('HGET', KEYS[2], user) or '0') < units then
    redis.call('HSET', KEYS[2], user, units)
  end
end
redis.call('INCR', KEYS[5])
redis.call('DEL', KEYS[6])
return 1
