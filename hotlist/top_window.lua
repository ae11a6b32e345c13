-- The hottest items of one partition over the live slots of a window.
-- KEYS[1] the partition's meta hash: epoch (the slot whose heat set is
--         current), mig and ready (a heat set built for a coming slot)
-- KEYS[2], KEYS[3] the heat sets of even and odd slots
-- KEYS[4 .. 3+S] the live slots' sorted sets, the current slot first; when
--         absent, a partition without a heat set for the slot answers {-1}
--         and the caller asks again with them
-- ARGV[1] n: how many items are wanted
-- ARGV[2] the caller's current slot
-- ARGV[3 .. 2+S] the slots' weights, current slot first
-- Returns {item, total, item, total, …}: from the heat set built for the
-- caller's slot when there is one, the n hottest; otherwise summed from the
-- slots, exactly, by Fagin's threshold algorithm — read each slot's top m,
-- total every item seen over all slots, stop once the n-th best total beats
-- the most an item not seen could have (the sum of the slots' m-th scores),
-- else read four times deeper — and then every item whose total is at least
-- the n-th best (ties at the cut included, for the caller to order by name).
-- Totals are summed slot by slot, current slot first.
local n, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'epoch', 'mig', 'ready')
local built
if tonumber(m[1]) == now then
  built = now
elseif m[3] and tonumber(m[2]) == now then
  built = now
end
if built then
  return redis.call('ZREVRANGE', KEYS[2 + built % 2], 0, n - 1, 'WITHSCORES')
end
if #KEYS == 3 then return {-1} end

local S = #KEYS - 3
local w = {}
for s = 1, S do w[s] = tonumber(ARGV[s + 2]) end
local function slot(s) return KEYS[s + 3] end
local total, cands = {}, {}
local read, depth = 0, math.max(n, 16)
while true do
  local bound, more, fresh = 0, false, {}
  for s = 1, S do
    if w[s] > 0 then
      local r = redis.call('ZREVRANGE', slot(s), read, depth - 1, 'WITHSCORES')
      for j = 1, #r, 2 do
        if not total[r[j]] then
          total[r[j]] = 0
          fresh[#fresh + 1] = r[j]
          cands[#cands + 1] = r[j]
        end
      end
      if #r == 2 * (depth - read) then
        more = true
        bound = bound + w[s] * tonumber(r[#r])
      elseif read == 0 and #r == 0 then
        w[s] = 0 -- empty: nothing to read or total there
      end
    end
  end
  -- Exact totals of the items seen for the first time.
  for j = 1, #fresh, 500 do
    local part = {unpack(fresh, j, math.min(j + 499, #fresh))}
    for s = 1, S do
      if w[s] > 0 then
        local sc = redis.call('ZMSCORE', slot(s), unpack(part))
        for k = 1, #part do
          if sc[k] then total[part[k]] = total[part[k]] + w[s] * tonumber(sc[k]) end
        end
      end
    end
  end
  local sums = {}
  for j = 1, #cands do sums[j] = total[cands[j]] end
  table.sort(sums, function(a, b) return a > b end)
  local cut = sums[n]
  if not more or (cut and cut > bound) then
    local out = {}
    for j = 1, #cands do
      local t = total[cands[j]]
      if not cut or t >= cut then
        out[#out + 1] = cands[j]
        out[#out + 1] = string.format('%.17g', t)
      end
    end
    return out
  end
  read, depth = depth, depth * 4
end
