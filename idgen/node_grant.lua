-- Grant a free node id of a pool, on the server's clock.
-- KEYS[1] the pool: a hash of node id → "token expires_ms holder"
-- ARGV[1] first id, ARGV[2] last id, ARGV[3] holder (unique per LeaseNode
-- call), ARGV[4] ttl in ms, ARGV[5] margin in ms
-- Returns {id, token}, or {-1, 0} when every id is held or in its margin.
-- The holder's live lease is returned again (a retried grant takes one id).
-- The token is max(last token + 1, now in ms): it grows with every grant,
-- and a grant repeated after a failover lost the last one still gets a
-- token no earlier grant had (unless the new master's clock is behind).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local ttl, margin = tonumber(ARGV[4]), tonumber(ARGV[5])
local leases = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  leases[tonumber(flat[i])] = flat[i + 1]
end
local pick, pickToken = nil, 0
for id = first, last do
  local v = leases[id]
  if v == nil then
    if pick == nil then pick, pickToken = id, 0 end
  else
    local tok, exp, holder = string.match(v, '^(%d+) (%d+) (.*)$')
    tok, exp = tonumber(tok), tonumber(exp)
    if holder == ARGV[3] and now < exp then
      return {id, tok}
    end
    if pick == nil and now >= exp + margin then pick, pickToken = id, tok end
  end
end
if pick == nil then
  return {-1, 0}
end
local token = math.max(pickToken + 1, now)
redis.call('HSET', KEYS[1], pick, string.format('%d %d %s', token, now + ttl, ARGV[3]))
return {pick, token}
