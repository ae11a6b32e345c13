-- Open packets: give each opener one share of the packet, once.
-- KEYS[1] the bucket's outbox stream; then for open i (1-based):
--   KEYS[2i] the packet's state hash (expires, recipient, claimed, amount,
--            and "u:<user>" → fen for every claim), KEYS[2i+1] its list of
--            shares left ("<index>:<fen>"); all under one bucket tag
-- ARGV[1] now (Unix ms); then for open i: ARGV[2i] user, ARGV[2i+1] packet id
-- Returns for each open the share in fen (> 0), or 0 no such packet, -1
-- expired, -2 empty, -3 not the recipient. A user holding a share of the
-- packet gets it again and nothing changes, so a retried call (a lost
-- reply) or a repeated open is harmless. A new claim is recorded in the
-- state (with the claimed count and amount: the fence Refund reads) and
-- appended to the outbox as a claim message, format 1:
--   {"v":1,"packet":<id>,"user":"<user>","amount":<fen>,"index":<draw>,"at":<ms>}
local now = tonumber(ARGV[1])
local out = {}
for i = 1, (#KEYS - 1) / 2 do
  local state, shares = KEYS[2 * i], KEYS[2 * i + 1]
  local user, packet = ARGV[2 * i], ARGV[2 * i + 1]
  local st = redis.call('HMGET', state, 'u:' .. user, 'expires', 'recipient', 'claimed', 'amount')
  if st[1] then
    out[i] = tonumber(st[1])
  elseif not st[2] then
    out[i] = 0
  elseif now >= tonumber(st[2]) then
    out[i] = -1
  elseif st[3] ~= '' and st[3] ~= user then
    out[i] = -3
  else
    local item = redis.call('LPOP', shares)
    if not item then
      out[i] = -2
    else
      local sep = string.find(item, ':', 1, true)
      local index, fen = string.sub(item, 1, sep - 1), string.sub(item, sep + 1)
      redis.call('HSET', state, 'u:' .. user, fen, 'claimed', tonumber(st[4]) + 1, 'amount', tonumber(st[5]) + tonumber(fen))
      redis.call('XADD', KEYS[1], '*', 'k', packet, 'v', '{"v":1,"packet":' .. packet .. ',"user":' .. cjson.encode(user) ..
        ',"amount":' .. fen .. ',"index":' .. index .. ',"at":' .. ARGV[1] .. '}')
      out[i] = tonumber(fen)
    end
  end
end
return out
