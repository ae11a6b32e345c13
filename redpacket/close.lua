-- Close a packet for its refund: from now on every open is refused as
-- expired (a holder still gets their share back), whatever the opener's
-- clock says, and the shares left are dropped. Idempotent: closing again —
-- a retry after a lost reply, a second refunder — changes nothing and
-- answers the same, for a closed packet takes no new claim.
-- KEYS[1] the packet's state hash, KEYS[2] its list of shares left; both
--         under one bucket tag
-- ARGV[1] how long a tombstone lives (ms)
-- Returns {'closed', field, value, …}, the state hash (its claims are the
-- fields "u:<user>", valued "<index>:<fen>"), or {'lost'} for a packet
-- whose state Redis lost: it is then closed with a tombstone, so that a
-- concurrent reopen does not bring it back.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'expires', 0, 'recipient', '', 'lost', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {'lost'}
end
if redis.call('HEXISTS', KEYS[1], 'lost') == 1 then return {'lost'} end
redis.call('HSET', KEYS[1], 'expires', 0)
redis.call('DEL', KEYS[2])
local st = redis.call('HGETALL', KEYS[1])
table.insert(st, 1, 'closed')
return st
