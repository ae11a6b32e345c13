-- Apply one partition's pre-aggregated increments, fenced by Kafka offset.
-- Both models keep a "heat" sorted set that readers rank from; the next one
-- is built chunk by chunk, by the flushes, while every increment is written
-- to both, and readers are switched to it atomically (the meta hash says
-- which set is current):
--   Decay: the set for landmark e holds Σ w·2^((t − L_e)/half-life); the
--   next landmark's set is the current one times 2^−(landmarks apart ×
--   half-lives), an exact power of two.
--   Window: the set for slot c holds each item's weighted total over the
--   slots live during c; the next slot's set is built before that slot
--   starts, from the current set's items and the next slot's, each total
--   summed afresh from the slot sets (which stay the record).
-- KEYS[1] the partition's meta hash: offset (the last Kafka offset applied),
--         epoch (the landmark, or slot, of the current heat set), mig (the
--         one being built), src and cursor (how far the build has read),
--         ready (Window: the build is complete, kept up to date until its
--         slot starts)
-- KEYS[2], KEYS[3] the heat sets of even and odd landmarks, or slots
-- KEYS[4..] Window: the slot sets of slots now−S+1 .. now+1, in order, then
--         other slot sets and like sets, referred to by index below
-- ARGV[1] the offset the caller last saw applied (-1: none)
-- ARGV[2], ARGV[3] the first and last offsets the increments cover; -1 and -1
--         for a call that only moves a build on
-- ARGV[4] keep: items kept per sorted set, the coolest beyond are trimmed
-- ARGV[5] items a build reads per call
-- ARGV[6] Decay: the landmark the increments are scaled to and the one to
--         rescale towards; -1 for Window
-- ARGV[7] Decay: half-lives between landmarks
-- ARGV[8] Window: the caller's current slot, -1 for Decay
-- ARGV[9] Window: S, the slots in the ring (0 for Decay)
-- ARGV[10], ARGV[11] Window: the caller's clock and the slot length, in ms
-- ARGV[12] Decay: -1, or the landmark of the current heat set as the caller
--         holds it (every member and score, as this script's last reply
--         left them): then each group's pairs are (new score, item), the
--         sums this script would write, and the increments it would not
--         admit (below a full set's lowest score, see admitted) are left
--         out; status -3 if the set is not that one, or is being rebuilt
-- ARGV[13] Decay: 1 to have the reply carry the heat set's members
-- ARGV[14 .. 13+S] Window: the slot weights, current slot first
-- then the number of groups, then per group: key index (0: the decay heat),
--         slot (Window), count, count × (item, increment) — or (new score,
--         item) under ARGV[12]
-- then the number of likes, then per like: set key index, key index and slot
--         (as for groups), member (item NUL user), item, increment — added
--         only if the member is new to the set
-- then the number of expiries, then per expiry: key index, unix ms
-- Returns {status, stored offset, epoch (-1: none), building (1 or 0)};
-- status 1: applied; 0: offsets already applied, nothing done (a retry after
-- a lost reply, or a replay); -1: another writer stored offsets past ARGV[1]
-- (fenced, nothing done); -2: the stored offset is behind ARGV[1] (Redis lost
-- writes, nothing done); -3: the caller's copy (ARGV[12]) is not of the
-- current set, or a set is being built (nothing done: send increments).
-- Decay, status 1, four more: the current heat set's size, its lowest
-- score ('' when not full), its members and scores (ARGV[13]) or else the
-- members the trim removed from it, and per like 1 if it was added, else 0.
local meta = KEYS[1]
local prev, from, to = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local keep, chunk = tonumber(ARGV[4]), tonumber(ARGV[5])
local target, step = tonumber(ARGV[6]), tonumber(ARGV[7])
local cnow, S = tonumber(ARGV[8]), tonumber(ARGV[9])
local view, want = tonumber(ARGV[12]), ARGV[13] == '1'
local m = redis.call('HMGET', meta, 'offset', 'epoch', 'mig', 'src', 'cursor', 'ready')
local stored = tonumber(m[1] or '-1')
local cur = tonumber(m[2] or '-1')
local mig = m[3] and tonumber(m[3])
local src, cursor, ready = tonumber(m[4] or '0'), m[5] or '0', m[6] and true

local function reply(status)
  return {status, stored, cur, (mig and not ready) and 1 or 0}
end

if to >= 0 then
  if to <= stored then return reply(0) end
  if stored > prev then return reply(-1) end
  if stored < prev then return reply(-2) end
end
-- The caller's copy holds since its last flush: the offset fence stops any
-- other writer, and only a switch of sets (a new epoch) changes the set
-- without storing an offset.
if view >= 0 and (target < 0 or cur ~= view or target ~= cur or mig) then return reply(-3) end

-- '%.17g' round-trips a double; Lua's own tostring keeps only 14 digits.
local function fmt(x) return string.format('%.17g', x) end
local function heat(e) return KEYS[2 + e % 2] end
local function drop(e) redis.call('UNLINK', heat(e)) end
local function startBuild(e)
  mig, src, cursor, ready = e, 0, '0', nil
  drop(e)
  redis.call('HSET', meta, 'mig', e, 'src', 0, 'cursor', '0')
  redis.call('HDEL', meta, 'ready')
end
local function endBuild()
  mig, ready = nil, nil
  redis.call('HDEL', meta, 'mig', 'src', 'cursor', 'ready')
end
local function setCurrent(e)
  cur = e
  if e >= 0 then redis.call('HSET', meta, 'epoch', e) else redis.call('HDEL', meta, 'epoch') end
end

local fcur, fmig = 1, 1
local w, slot = {}, nil
if target >= 0 then
  if cur < 0 then
    setCurrent(target)
  elseif (target - cur) * step > 900 then
    -- Idle for over 900 half-lives: every stored heat has decayed below
    -- 2^-900 of a new event's. Start afresh rather than overflow.
    drop(cur)
    drop(cur + 1)
    endBuild()
    setCurrent(target)
  end
  if not mig and target > cur then
    -- The newest landmark of the other parity, so as not to build into the
    -- current set's key.
    local e = target
    if (e - cur) % 2 == 0 then e = e - 1 end
    startBuild(e)
  end
  -- Powers of two: scaling by them is exact.
  fcur = 2 ^ ((target - cur) * step)
  if mig then fmig = 2 ^ ((target - mig) * step) end
elseif cnow >= 0 then
  local nowms, slotms = tonumber(ARGV[10]), tonumber(ARGV[11])
  for j = 0, S - 1 do w[j] = tonumber(ARGV[14 + j]) end
  slot = function(s) return KEYS[4 + s - (cnow - S + 1)] end -- s in now−S+1 .. now+1
  if mig and ready and mig == cnow then
    -- The slot has started: its set becomes the current one.
    if cur >= 0 then drop(cur) end
    setCurrent(mig)
    endBuild()
  end
  if mig and (mig < cnow or mig > cnow + 1) then
    drop(mig) -- a build for a slot already past (or a clock gone back)
    endBuild()
  end
  if not mig then
    local t
    if cur < cnow then
      t = cnow -- no set for the current slot: readers use the slots until built
    elseif cur == cnow and nowms >= (cnow + 1) * slotms - math.min(slotms / 2, 60000) then
      t = cnow + 1 -- the next slot's set, built over this slot's last minute (or half)
    end
    if t then
      if cur >= 0 and (t - cur) % 2 == 0 then
        drop(cur) -- too old to build from, and in the way
        setCurrent(-1)
      end
      startBuild(t)
    end
  end
end

-- v is the increment as sent: passed on untouched unless it needs scaling.
local function scaled(v, f)
  if f == 1 then return v end
  return fmt(tonumber(v) * f)
end
-- Window: the heat sets whose window holds slot s, and the slot's weight in
-- each: a build's copy sums the slot sets, which hold every increment
-- already, so copy and increment never count one twice.
local function windowsOf(s)
  local hc, wc, hm, wm
  if cur >= 0 and s <= cur and s > cur - S then hc, wc = heat(cur), w[cur - s] end
  if mig and s <= mig and s > mig - S then hm, wm = heat(mig), w[mig - s] end
  return hc, wc, hm, wm
end
local touched = {}
local function add(ki, s, item, v)
  if ki == 0 then
    redis.call('ZINCRBY', heat(cur), scaled(v, fcur), item)
    -- While rescaling, the new set gets every increment too: copied items
    -- stay equal to their original times the landmark factor, uncopied ones
    -- are overwritten by the copy with that same value.
    if mig then redis.call('ZINCRBY', heat(mig), scaled(v, fmig), item) end
    return
  end
  redis.call('ZINCRBY', KEYS[ki], v, item)
  touched[ki] = s
  local hc, wc, hm, wm = windowsOf(s)
  if hc then redis.call('ZINCRBY', hc, scaled(v, wc), item) end
  if hm then redis.call('ZINCRBY', hm, scaled(v, wm), item) end
end

-- scores reads key's current scores of items (false for an absent one),
-- one ZMSCORE per thousand.
local function scores(key, items)
  local old = {}
  for a = 1, #items, 1000 do
    local b = math.min(a + 999, #items)
    local got = redis.call('ZMSCORE', key, unpack(items, a, b))
    for k = a, b do old[k] = got[k - a + 1] end
  end
  return old
end

-- addAll adds vals[k] × f to items[k] in key for every k that ok admits
-- (nil: all), old being key's current scores of items (nil: read them),
-- with one ZADD per thousand items instead of a ZINCRBY each: the new score
-- is the current one (ZMSCORE's reply holds it exactly, as '%.17g') plus
-- the increment, the same double ZINCRBY computes; an absent item's is the
-- increment, its text as sent when f is 1 (string.format costs more than
-- the ZADD). Items are distinct within a call (the aggregator sums each
-- item's increments), so no ZADD member is given twice.
local function addAll(key, items, vals, f, ok, old)
  old = old or scores(key, items)
  for a = 1, #items, 1000 do
    local out = {}
    for k = a, math.min(a + 999, #items) do
      if not ok or ok[k] then
        local o = old[k]
        if o then
          out[#out + 1] = fmt(tonumber(o) + tonumber(vals[k]) * f)
        elseif f == 1 then
          out[#out + 1] = vals[k]
        else
          out[#out + 1] = fmt(tonumber(vals[k]) * f)
        end
        out[#out + 1] = items[k]
      end
    end
    if #out > 0 then redis.call('ZADD', key, unpack(out)) end
  end
end

-- admitted says which of items (increments vals × f) may change key, old
-- being their current scores: when key is full (keep items), an absent
-- item whose increment is below its lowest score would be trimmed at once,
-- so it is not written at all — the same end state for much less work when
-- most items are a long tail. Nil: all of them.
local function admitted(key, items, vals, f, old)
  if redis.call('ZCARD', key) < keep then return nil end
  local floor = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
  local ok = {}
  for k = 1, #items do
    ok[k] = old[k] and true or tonumber(vals[k]) * f >= floor
  end
  return ok
end
local i = 14 + S
local ngroups = tonumber(ARGV[i])
i = i + 1
for _ = 1, ngroups do
  local ki, s, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local hk = ki == 0 and heat(cur) or KEYS[ki]
  if view >= 0 then
    -- The caller's copy of the set made the decisions and the sums.
    local last = i + 2 + 2 * n
    for a = i + 3, last, 800 do
      redis.call('ZADD', hk, unpack(ARGV, a, math.min(a + 799, last)))
    end
  else
    local items, vals = {}, {}
    for k = 1, n do
      items[k] = ARGV[i + 1 + 2 * k]
      vals[k] = ARGV[i + 2 + 2 * k]
    end
    -- Decay: the rescale copy takes the set's decisions, so that it stays
    -- the set times the landmark factor. Window: so do the heat sets, so
    -- that they stay the weighted sums of the slot sets.
    local f, h1, f1, h2, f2 = fcur, nil, nil, mig and heat(mig), fmig
    if ki > 0 then
      touched[ki] = s
      f = 1
      h1, f1, h2, f2 = windowsOf(s)
    end
    local old = scores(hk, items)
    local ok = nil
    if redis.call('ZCARD', hk) + n > keep then ok = admitted(hk, items, vals, f, old) end
    addAll(hk, items, vals, f, ok, old)
    if h1 then addAll(h1, items, vals, f1, ok) end
    if h2 then addAll(h2, items, vals, f2, ok) end
  end
  i = i + 3 + 2 * n
end
local nlikes = tonumber(ARGV[i])
i = i + 1
local liked = {} -- 1 for each like added, 0 for one the user had given
for j = 1, nlikes do
  liked[j] = redis.call('SADD', KEYS[tonumber(ARGV[i])], ARGV[i + 3])
  if liked[j] == 1 then
    add(tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 4], ARGV[i + 5])
  end
  i = i + 6
end
local nexp = tonumber(ARGV[i])
i = i + 1
for _ = 1, nexp do
  redis.call('PEXPIREAT', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
  i = i + 2
end

-- Trim to keep: the coolest go (lowest score, then lowest name).
-- Window: what a slot set trims leaves the heat sets too, so that they stay
-- the weighted sums of the slot sets (and hold at most Slots × keep items:
-- they are not trimmed themselves).
for ki, s in pairs(touched) do
  local over = redis.call('ZCARD', KEYS[ki]) - keep
  if over > 0 then
    local hc, wc, hm, wm = windowsOf(s)
    if hc or hm then
      local gone = redis.call('ZRANGE', KEYS[ki], 0, over - 1, 'WITHSCORES')
      for j = 1, #gone, 2 do
        for _, h in ipairs({{hc, wc}, {hm, wm}}) do
          if h[1] and tonumber(redis.call('ZINCRBY', h[1], fmt(-h[2] * tonumber(gone[j + 1])), gone[j])) <= 0 then
            redis.call('ZREM', h[1], gone[j])
          end
        end
      end
    end
    redis.call('ZREMRANGEBYRANK', KEYS[ki], 0, over - 1)
  end
end
local trimmed = {}
if target >= 0 then
  -- The rescale copy loses the same items, so that it stays the current
  -- set times the landmark factor.
  local over = redis.call('ZCARD', heat(cur)) - keep
  while over > 0 do
    local gone = redis.call('ZRANGE', heat(cur), 0, math.min(over, 1000) - 1)
    if #gone == 0 then break end
    redis.call('ZREMRANGEBYRANK', heat(cur), 0, #gone - 1) -- the same members, found by rank
    if mig then redis.call('ZREM', heat(mig), unpack(gone)) end
    for _, g in ipairs(gone) do trimmed[#trimmed + 1] = g end
    over = over - #gone
  end
end

local function zadd(key, list)
  for j = 1, #list, 400 do
    redis.call('ZADD', key, unpack(list, j, math.min(j + 399, #list)))
  end
end

-- One chunk of a build.
if mig and target >= 0 then
  -- Decay: copy items scaled to the new landmark; when the scan is
  -- complete, switch readers to the new set and drop the old one.
  local res = redis.call('ZSCAN', heat(cur), cursor, 'COUNT', chunk)
  local flat, f, out = res[2], 2 ^ ((cur - mig) * step), {}
  for j = 1, #flat, 2 do
    out[#out + 1] = fmt(tonumber(flat[j + 1]) * f)
    out[#out + 1] = flat[j]
  end
  zadd(heat(mig), out)
  if res[1] == '0' then
    drop(cur)
    setCurrent(mig)
    endBuild()
  else
    redis.call('HSET', meta, 'cursor', res[1])
  end
elseif mig and not ready then
  -- Window: the items of the next window are those of the current set (its
  -- window shares all but one slot) and of the new slot; without a current
  -- set for the slot before, those of every slot. Each total is summed
  -- afresh over the new window's slots, current slot first.
  local sources = {}
  if cur == mig - 1 then
    sources = {heat(cur), slot(mig)}
  else
    for s = mig, mig - S + 1, -1 do sources[#sources + 1] = slot(s) end
  end
  local budget = chunk
  while not ready and budget > 0 do
    local res = redis.call('ZSCAN', sources[src + 1], cursor, 'COUNT', budget)
    local items = {}
    for j = 1, #res[2], 2 do items[#items + 1] = res[2][j] end
    budget = budget - math.max(#items, 1)
    if #items > 0 then
      local totals = {}
      for k = 1, #items do totals[k] = 0 end
      for j = 0, S - 1 do
        for a = 1, w[j] ~= 0 and #items or 0, 1000 do
          local b = math.min(a + 999, #items)
          local sc = redis.call('ZMSCORE', slot(mig - j), unpack(items, a, b))
          for k = a, b do
            if sc[k - a + 1] then totals[k] = totals[k] + w[j] * tonumber(sc[k - a + 1]) end
          end
        end
      end
      local out = {}
      for k = 1, #items do
        if totals[k] > 0 then
          out[#out + 1] = fmt(totals[k])
          out[#out + 1] = items[k]
        end
      end
      zadd(heat(mig), out)
    end
    cursor = res[1]
    if cursor == '0' then src = src + 1 end
    ready = src == #sources
  end
  if ready then
    redis.call('HSET', meta, 'ready', 1)
  else
    redis.call('HSET', meta, 'src', src, 'cursor', cursor)
  end
end

-- A window's heat set is of no use once its slot is over: if the flushes
-- stop, it goes (readers then sum the slots, which expire too).
if cnow >= 0 then
  local slotms = tonumber(ARGV[11])
  if cur >= 0 then redis.call('PEXPIREAT', heat(cur), (cur + 2) * slotms) end
  if mig then redis.call('PEXPIREAT', heat(mig), (mig + 2) * slotms) end
end

if to >= 0 then
  redis.call('HSET', meta, 'offset', ARGV[3])
  stored = to
end
if target < 0 then return reply(1) end
-- Decay: what the caller's copy follows the set by, and is checked against.
local out = reply(1)
local card, floor = redis.call('ZCARD', heat(cur)), ''
if card >= keep then floor = redis.call('ZRANGE', heat(cur), 0, 0, 'WITHSCORES')[2] end
if want then trimmed = redis.call('ZRANGE', heat(cur), 0, -1, 'WITHSCORES') end
out[5], out[6], out[7], out[8] = card, floor, trimmed, liked
return out
