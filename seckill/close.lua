-- Close a reservation on its bucket: remove its slot from its batch's
-- record (the record and its deadline go with the last slot) and, when
-- ARGV[4] is 1, return its units to the bucket's stock.
-- KEYS[1] stock   KEYS[2] reservations   KEYS[3] due   KEYS[4] recent (this
-- retry window's hash)   KEYS[5] version (bumped by every change, for Reconcile)
-- ARGV[1] reservation id ("…-<batch>" for slot 0, "…-<batch>.<slot>")
-- ARGV[2] call id (random, one per call)
-- ARGV[3] 1 to restock, 0 to only close (paid, or refused by SQL)
-- ARGV[4] TTL of recent, ms
-- Returns "user|qty|home" of the reservation if this call closed it, else "".
-- The call sent again after its reply was lost gets its first answer, so the
-- caller that closed the reservation, and only it, returns the quota.
local done = redis.call('HGET', KEYS[4], 'c:' .. ARGV[2])
if done then return done end
local batch, slot = string.match(ARGV[1], '%-(%d+)%.(%d+)$')
if not batch then batch, slot = string.match(ARGV[1], '%-(%d+)$'), '0' end
local rec = redis.call('HGET', KEYS[2], batch)
if not rec then
  redis.call('ZREM', KEYS[3], batch) -- a stray deadline
  return ''
end
local from = string.find(rec, ';' .. slot .. '=', 1, true)
if not from then return '' end
local to = string.find(rec, ';', from + 1, true) or #rec + 1
local user, qty = string.match(string.sub(rec, from, to - 1), '^;%d+=(.*),(%d+)$')
local home = string.match(rec, '^%d+')
rec = string.sub(rec, 1, from - 1) .. string.sub(rec, to)
if string.find(rec, ';', 1, true) then
  redis.call('HSET', KEYS[2], batch, rec)
else
  redis.call('HDEL', KEYS[2], batch)
  redis.call('ZREM', KEYS[3], batch)
end
if ARGV[3] == '1' then redis.call('INCRBY', KEYS[1], qty) end
local r = user .. '|' .. qty .. '|' .. home
redis.call('INCR', KEYS[5])
redis.call('HSET', KEYS[4], 'c:' .. ARGV[2], r)
redis.call('PEXPIRE', KEYS[4], ARGV[4])
return r
