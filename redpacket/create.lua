-- Open a packet in Redis, once: a packet open already is left as it is. A
-- packet whose Redis state was lost is reopened from SQL with the claims
-- SQL holds.
-- KEYS[1] the packet's state hash (expires, recipient, claimed, amount,
--         "u:<user>" → fen), KEYS[2] its list of shares not yet taken; both
--         under one bucket tag
-- ARGV[1] expiry (Unix ms)   ARGV[2] the only recipient, or ''
-- ARGV[3] how long the keys live (ms; relative, so the caller's clock and
--         the server's need not agree)
-- ARGV[4] claims so far   ARGV[5] fen claimed so far
-- ARGV[6] n, the shares not yet taken, in draw order, as "<index>:<fen>":
--         ARGV[7 .. 6+n]
-- ARGV[7+n ..] pairs of "u:<user>" and fen for the claims so far
-- A packet of more than 64 shares gets a 'wide' field of 65 bytes, which
-- keeps its state hash out of the listpack encoding (hash-max-listpack-value
-- is 64 by default): every open looks its users up in the hash, and a
-- listpack of hundreds of claims is scanned entry by entry at each lookup.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'expires', ARGV[1], 'recipient', ARGV[2], 'claimed', ARGV[4], 'amount', ARGV[5])
local n = tonumber(ARGV[6])
if tonumber(ARGV[4]) + n > 64 then redis.call('HSET', KEYS[1], 'wide', string.rep('-', 65)) end
if n > 0 then redis.call('RPUSH', KEYS[2], unpack(ARGV, 7, 6 + n)) end
if #ARGV > 6 + n then redis.call('HSET', KEYS[1], unpack(ARGV, 7 + n)) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
