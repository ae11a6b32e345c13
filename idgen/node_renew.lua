-- Renew a node lease, on the server's clock.
-- KEYS[1] the pool: a hash of node id → "token expires_ms holder"
-- ARGV[1] node id, ARGV[2] token, ARGV[3] holder, ARGV[4] ttl in ms
-- Returns 1 when the lease now ends ttl from now, 0 when holder does not
-- hold it with token (expired, released, granted again). Idempotent: a
-- retry extends it again from its own now.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return 0
end
local tok, exp, holder = string.match(v, '^(%d+) (%d+) (.*)$')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tok ~= ARGV[2] or holder ~= ARGV[3] or now >= tonumber(exp) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%s %d %s', tok, now + tonumber(ARGV[4]), holder))
return 1
