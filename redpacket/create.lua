-- Open a packet in Redis, once: a packet open already — or closed by its
-- refund — is left as it is. A packet whose Redis state was lost is
-- reopened from SQL with the claims SQL holds and only the shares it does
-- not record as claimed.
-- KEYS[1] the packet's state hash (expires, recipient, "u:<user>" →
--         "<index>:<fen>"), KEYS[2] its list of shares not yet taken; both
--         under one bucket tag
-- ARGV[1] expiry (Unix ms)   ARGV[2] the only recipient, or ''
-- ARGV[3] how long the keys live (ms; relative, so the caller's clock and
--         the server's need not agree)
-- ARGV[4] the packet's count of shares
-- ARGV[5] n, the shares not yet taken, in draw order, as "<index>:<fen>":
--         ARGV[6 .. 5+n]
-- ARGV[6+n ..] pairs of "u:<user>" and "<index>:<fen>" for the claims so far
-- Returns 1 if it opened the packet, 0 if the state was there.
-- A packet of more than 64 shares gets a 'wide' field of 65 bytes, which
-- keeps its state hash out of the listpack encoding (hash-max-listpack-value
-- is 64 by default): every open looks its users up in the hash, and a
-- listpack of hundreds of claims is scanned entry by entry at each lookup.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'expires', ARGV[1], 'recipient', ARGV[2])
local n = tonumber(ARGV[5])
if tonumber(ARGV[4]) > 64 then redis.call('HSET', KEYS[1], 'wide', string.rep('-', 65)) end
if n > 0 then redis.call('RPUSH', KEYS[2], unpack(ARGV, 6, 5 + n)) end
if #ARGV > 5 + n then redis.call('HSET', KEYS[1], unpack(ARGV, 6 + n)) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
