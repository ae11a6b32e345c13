-- Open packets: give each opener one share of the packet, once.
-- KEYS[1] the bucket's outbox stream; then for packet j (1-based):
--   KEYS[2j] the packet's state hash (expires — 0 once a refund closed it —,
--            recipient, and "u:<user>" → "<index>:<fen>" for every claim),
--            KEYS[2j+1] its list of shares left ("<index>:<fen>"); all under
--            one bucket tag
-- ARGV[1] now (Unix ms); then for each packet, in the order of KEYS: its
--   id, n, and the n fields "u:<user>" of its openers (distinct: the caller
--   merges a user's repeated opens of a packet)
-- Returns for each opener, in the order of ARGV, the share in fen (> 0), or
-- 0 no such packet, -1 expired, -2 empty, -3 not the recipient. A user
-- holding a share of the packet gets it again and nothing changes, so a
-- retried call (a lost reply) or a repeated open is harmless. A packet's
-- state is read with one HMGET, its new claims' shares popped with one LPOP
-- and recorded, each with its index (the refund checks them against the
-- ledger), with one HSET; the packet's new claims of the call are appended to the
-- outbox as one claim message, format 2 (user ids are printable ASCII:
-- only '"' and '\' need escaping):
--   {"v":2,"packet":<id>,"at":<ms>,"claims":[{"user":"<user>","amount":<fen>,"index":<draw>},…]}
local now = tonumber(ARGV[1])
local out = {}
local a = 2
for j = 2, #KEYS, 2 do
  local state, shares = KEYS[j], KEYS[j + 1]
  local packet, n = ARGV[a], tonumber(ARGV[a + 1])
  local first = a + 2
  a = first + n
  local st = redis.call('HMGET', state, 'expires', 'recipient', unpack(ARGV, first, a - 1))
  local expires, recipient = tonumber(st[1]), st[2]
  local base, want = #out, {}
  for i = 1, n do
    local had = st[2 + i]
    if had then
      local sep = string.find(had, ':', 1, true) -- none in a claim recorded before the index was
      out[base + i] = tonumber(sep and string.sub(had, sep + 1) or had)
    elseif not expires then
      out[base + i] = 0
    elseif now >= expires then
      out[base + i] = -1
    elseif recipient ~= '' and 'u:' .. recipient ~= ARGV[first + i - 1] then
      out[base + i] = -3
    else
      want[#want + 1] = i
    end
  end
  if #want > 0 then
    local items = redis.call('LPOP', shares, #want) or {}
    local set, claims = {}, {}
    for k, i in ipairs(want) do
      local item = items[k]
      if item then
        local sep = string.find(item, ':', 1, true)
        local index, fen = string.sub(item, 1, sep - 1), string.sub(item, sep + 1)
        local field = ARGV[first + i - 1]
        set[#set + 1] = field
        set[#set + 1] = item
        local user = string.sub(field, 3)
        if string.find(user, '["\\]') then user = string.gsub(user, '["\\]', '\\%0') end
        claims[#claims + 1] = '{"user":"' .. user .. '","amount":' .. fen .. ',"index":' .. index .. '}'
        out[base + i] = tonumber(fen)
      else
        out[base + i] = -2
      end
    end
    if #claims > 0 then
      redis.call('HSET', state, unpack(set))
      redis.call('XADD', KEYS[1], '*', 'k', packet, 'v', '{"v":2,"packet":' .. packet .. ',"at":' .. ARGV[1] .. ',"claims":[' .. table.concat(claims, ',') .. ']}')
    end
  end
end
return out
