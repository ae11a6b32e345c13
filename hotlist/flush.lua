-- Apply one partition's pre-aggregated increments, fenced by Kafka offset.
-- KEYS[1] the partition's meta hash: offset (the last Kafka offset applied);
--         Decay also: epoch (the landmark number of the heat set readers
--         use), mig (the landmark being built while rescaling), cursor (the
--         rescale's ZSCAN cursor)
-- KEYS[2], KEYS[3] Decay: the heat sorted sets of even and odd landmarks
-- KEYS[4..] Window slot sorted sets and like sets, referred to by index below
-- ARGV[1] the offset the caller last saw applied (-1: none)
-- ARGV[2], ARGV[3] the first and last offsets the increments cover; -1 and -1
--         for a call that only moves a rescale on
-- ARGV[4] keep: items kept per sorted set, the coolest beyond are trimmed
-- ARGV[5] Decay: the landmark number the increments are scaled to, which is
--         also the one to rescale towards; -1 for Window
-- ARGV[6] Decay: half-lives between landmarks
-- ARGV[7] Decay: items copied per call while rescaling
-- ARGV[8] the number of groups, then per group: key index (0: the decay
--         heat), count, count × (item, increment)
-- then the number of likes, then per like: set key index, key index (as for
--         groups), member (item NUL user), item, increment — added only if the
--         member is new to the set
-- then the number of expiries, then per expiry: key index, unix ms
-- Returns {status, stored offset, epoch (-1: none), rescaling (1 or 0)};
-- status 1: applied; 0: offsets already applied, nothing done (a retry after
-- a lost reply, or a replay); -1: another writer stored offsets past ARGV[1]
-- (fenced, nothing done); -2: the stored offset is behind ARGV[1] (Redis lost
-- writes, nothing done).
local meta = KEYS[1]
local prev, from, to = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local keep, target, step, chunk = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local m = redis.call('HMGET', meta, 'offset', 'epoch', 'mig', 'cursor')
local stored = tonumber(m[1] or '-1')
local cur = tonumber(m[2] or '-1')
local mig = m[3] and tonumber(m[3])

local function reply(status)
  return {status, stored, cur, mig and 1 or 0}
end

if to >= 0 then
  if to <= stored then return reply(0) end
  if stored > prev then return reply(-1) end
  if stored < prev then return reply(-2) end
end

-- '%.17g' round-trips a double; Lua's own tostring keeps only 14 digits.
local function fmt(x) return string.format('%.17g', x) end
local function heat(e) return KEYS[2 + e % 2] end

local fcur, fmig = 1, 1
if target >= 0 then
  if cur < 0 then
    cur = target
    redis.call('HSET', meta, 'epoch', cur)
  elseif (target - cur) * step > 900 then
    -- Idle for over 900 half-lives: every stored heat has decayed below
    -- 2^-900 of a new event's. Start afresh rather than overflow.
    redis.call('UNLINK', heat(cur), heat(cur + 1))
    redis.call('HDEL', meta, 'mig', 'cursor')
    cur, mig = target, nil
    redis.call('HSET', meta, 'epoch', cur)
  end
  if not mig and target > cur then
    -- Build the next landmark's set in the other key of the pair: the
    -- newest landmark of the other parity.
    mig = target
    if (mig - cur) % 2 == 0 then mig = mig - 1 end
    redis.call('UNLINK', heat(mig))
    redis.call('HSET', meta, 'mig', mig, 'cursor', '0')
  end
  -- Powers of two: scaling by them is exact.
  fcur = 2 ^ ((target - cur) * step)
  if mig then fmig = 2 ^ ((target - mig) * step) end
end

local touched = {}
local function add(ki, item, v)
  if ki == 0 then
    redis.call('ZINCRBY', heat(cur), fmt(v * fcur), item)
    -- While rescaling, the new set gets every increment too: copied items
    -- stay equal to their original times the landmark factor, uncopied ones
    -- are overwritten by the copy with that same value.
    if mig then redis.call('ZINCRBY', heat(mig), fmt(v * fmig), item) end
  else
    redis.call('ZINCRBY', KEYS[ki], fmt(v), item)
    touched[ki] = true
  end
end

local i = 9
for _ = 1, tonumber(ARGV[8]) do
  local ki, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  for _ = 1, n do
    add(ki, ARGV[i], tonumber(ARGV[i + 1]))
    i = i + 2
  end
end
local nlikes = tonumber(ARGV[i])
i = i + 1
for _ = 1, nlikes do
  if redis.call('SADD', KEYS[tonumber(ARGV[i])], ARGV[i + 2]) == 1 then
    add(tonumber(ARGV[i + 1]), ARGV[i + 3], tonumber(ARGV[i + 4]))
  end
  i = i + 5
end
local nexp = tonumber(ARGV[i])
i = i + 1
for _ = 1, nexp do
  redis.call('PEXPIREAT', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
  i = i + 2
end

-- Trim to keep: the coolest go (lowest score, then lowest name).
for ki in pairs(touched) do
  local over = redis.call('ZCARD', KEYS[ki]) - keep
  if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[ki], 0, over - 1) end
end
if target >= 0 then
  local over = redis.call('ZCARD', heat(cur)) - keep
  while over > 0 do
    local gone = redis.call('ZRANGE', heat(cur), 0, math.min(over, 1000) - 1)
    if #gone == 0 then break end
    redis.call('ZREM', heat(cur), unpack(gone))
    if mig then redis.call('ZREM', heat(mig), unpack(gone)) end
    over = over - #gone
  end
end

-- One chunk of a rescale: copy items, scaled to the new landmark; when the
-- scan is complete, switch readers to the new set and drop the old one.
if target >= 0 and mig then
  local res = redis.call('ZSCAN', heat(cur), m[4] or '0', 'COUNT', chunk)
  local flat, f = res[2], 2 ^ ((cur - mig) * step)
  for j = 1, #flat, 400 do
    local args = {}
    for k = j, math.min(j + 398, #flat - 1), 2 do
      args[#args + 1] = fmt(tonumber(flat[k + 1]) * f)
      args[#args + 1] = flat[k]
    end
    redis.call('ZADD', heat(mig), unpack(args))
  end
  if res[1] == '0' then
    redis.call('UNLINK', heat(cur))
    cur, mig = mig, nil
    redis.call('HSET', meta, 'epoch', cur)
    redis.call('HDEL', meta, 'mig', 'cursor')
  else
    redis.call('HSET', meta, 'cursor', res[1])
  end
end

if to >= 0 then
  redis.call('HSET', meta, 'offset', ARGV[3])
  stored = to
end
return reply(1)
