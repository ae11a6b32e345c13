-- (shared header, prepended to sign.lua and makeup.lua at load time)
-- Bit k of a Redis bitmap is the (k % 8)-th most significant bit of byte
-- k / 8: SETBIT/GETBIT numbering, which BITCOUNT ranges only follow with BIT.
-- (Arithmetic rather than the bit library, which not every Lua host has.)
local function isset(s, k)
  local b = string.byte(s, math.floor(k / 8) + 1)
  if not b then return false end
  return math.floor(b / 2 ^ (7 - k % 8)) % 2 == 1
end

-- run_back counts consecutive signed days ending at offset `from` of the
-- year in KEYS[ki], continuing into earlier years (KEYS[ki-1], …, down to
-- KEYS[1]) whose lengths are in `lengths` (indexed like KEYS).
local function run_back(ki, from, lengths)
  local n = 0
  while ki >= 1 do
    local s = redis.call('GET', KEYS[ki]) or ''
    local k = from
    while k >= 0 and isset(s, k) do
      n = n + 1
      k = k - 1
    end
    if k >= 0 then return n end
    ki = ki - 1
    if ki >= 1 then from = lengths[ki] - 1 end
  end
  return n
end

-- A reward event: key = user, value = the reward message, format version 1.
local function reward(outbox, user, date, kind, points)
  local msg = cjson.encode({v = 1, user = user, date = date, kind = kind, points = tonumber(points)})
  redis.call('XADD', outbox, '*', 'k', user, 'v', msg)
end
