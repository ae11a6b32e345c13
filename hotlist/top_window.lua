-- The hottest items of one partition over the live slots of a window, exact,
-- by Fagin's threshold algorithm: read each slot's top m, total every item
-- seen over all slots, and stop once the n-th best total beats the most an
-- item not seen could have (the sum of the slots' m-th scores); else read
-- four times deeper.
-- KEYS[1..S] the live slots' sorted sets, the current slot first
-- ARGV[1] n: how many items are wanted
-- ARGV[2..S+1] the slots' weights
-- Returns {item, total, item, total, …}: every item whose weighted total is at
-- least the n-th best (ties at the cut included, for the caller to order by
-- name), or every item when there are fewer than n. Totals are summed slot
-- by slot in KEYS order.
local n = tonumber(ARGV[1])
local w = {}
for s = 1, #KEYS do w[s] = tonumber(ARGV[s + 1]) end
local total, cands = {}, {}
local read, m = 0, n
while true do
  local bound, more, fresh = 0, false, {}
  for s = 1, #KEYS do
    if w[s] > 0 then
      local r = redis.call('ZREVRANGE', KEYS[s], read, m - 1, 'WITHSCORES')
      for j = 1, #r, 2 do
        if not total[r[j]] then
          total[r[j]] = 0
          fresh[#fresh + 1] = r[j]
          cands[#cands + 1] = r[j]
        end
      end
      if #r == 2 * (m - read) then
        more = true
        bound = bound + w[s] * tonumber(r[#r])
      end
    end
  end
  -- Exact totals of the items seen for the first time.
  local sums = {}
  for j = 1, #fresh, 500 do
    local part = {unpack(fresh, j, math.min(j + 499, #fresh))}
    for s = 1, #KEYS do
      if w[s] > 0 then
        local sc = redis.call('ZMSCORE', KEYS[s], unpack(part))
        for k = 1, #part do
          if sc[k] then total[part[k]] = total[part[k]] + w[s] * tonumber(sc[k]) end
        end
      end
    end
  end
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
  read, m = m, m * 4
end
