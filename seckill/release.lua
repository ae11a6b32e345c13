-- Close a reservation on its bucket: remove it and, when ARGV[2] is 1,
-- return its units to the bucket's stock.
-- KEYS[1] stock   KEYS[2] reservations   KEYS[3] due
-- ARGV[1] reservation id   ARGV[2] 1 to restock, 0 to only close (paid, or
-- refused by SQL)
-- Returns "user|qty|home" of the reservation if it was open, else "".
local r = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if not r then return '' end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] == '1' then
  local qty = tonumber(string.match(r, '|(%d+)|'))
  redis.call('INCRBY', KEYS[1], qty)
end
return r
