-- (shared header of the day scripts, prepended after bits.lua)
-- Days are numbered from 1970-01-01 (day 0). A day script sees four
-- consecutive user-years, base..base+3, and the user's state:
-- KEYS[1..4]  the signed days of years base..base+3 (bit 0 = 1 January)
-- KEYS[5..8]  the frozen days of the same years
-- KEYS[9]     the user's state   KEYS[10] the bucket's layout key
-- KEYS[11]    the bucket's outbox stream   KEYS[12] per script
-- ARGV[1] user   ARGV[2] the layout ('bitmaps' or 'packed/<n>')
-- ARGV[3..7]  the day number of 1 January of years base..base+4
-- ARGV[8..11] expiry ms of the user-years base..base+3
-- ARGV[12] daily points   ARGV[13] bonus points   ARGV[14] bonus every N
-- ARGV[15] freezes a user may hold   ARGV[16] the script's day (see each)
--
-- The state, "1 L S cur longest total freezes frozen": L the latest day
-- covered (signed or frozen), S the day through which freezes have been
-- settled, cur the signed days of the run ending at L, longest the longest
-- run ever, total the signed days ever, freezes held, frozen days ever.
-- Invariant: S >= L - 1; the days after max(L, S) are not decided yet; the
-- streak is broken when S > L (a missed day was settled without a freeze).
local NONE = -1000000
local starts, st = {}, nil
for i = 1, 5 do starts[i] = tonumber(ARGV[2 + i]) end
local every, maxfreezes = tonumber(ARGV[14]), tonumber(ARGV[15])

-- locate returns the key index and bit of day dn, nil outside the years.
local function locate(dn)
  for i = 1, 4 do
    if dn >= starts[i] and dn < starts[i + 1] then return i, dn - starts[i] end
  end
  return nil
end

local function signed(dn)
  local i, k = locate(dn)
  return i ~= nil and isset(load(i), k)
end

local function frozen(dn)
  local i, k = locate(dn)
  return i ~= nil and isset(load(i + 4), k)
end

local function covered(dn) return signed(dn) or frozen(dn) end

-- mark sets (v = 1) or clears (0) day dn in the signed (kind 0) or frozen
-- (kind 4) user-years; days outside the years have expired and are skipped.
local function mark(dn, kind, v)
  local i, k = locate(dn)
  if i == nil then return end
  setbit(i + kind, k, v)
  redis.call('PEXPIREAT', KEYS[i + kind], ARGV[7 + i])
end

-- date_of is day dn as 'YYYY-MM-DD' (H. Hinnant's civil_from_days).
local function date_of(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02d', y, m, d)
end

-- back counts the signed days of the run of covered days ending at dn.
local function back(dn)
  local n = 0
  while covered(dn) do
    if signed(dn) then n = n + 1 end
    dn = dn - 1
  end
  return n
end

-- load_state reads the user's state. A user without one (new, or signed by
-- a version that kept none) gets it from the days the four years hold.
local function load_state()
  local raw = load(9)
  if raw ~= '' then
    local v = {}
    for n in string.gmatch(raw, '%-?%d+') do v[#v + 1] = tonumber(n) end
    st = {L = v[2], S = v[3], cur = v[4], longest = v[5], total = v[6], freezes = v[7], frozen = v[8]}
    return
  end
  st = {L = NONE, S = NONE, cur = 0, longest = 0, total = 0, freezes = 0, frozen = 0}
  local any = false
  for i = 1, 8 do any = any or load(i) ~= '' end
  if not any then return end
  local run = 0
  for dn = starts[1], starts[5] - 1 do
    if covered(dn) then
      if signed(dn) then
        run = run + 1
        st.total = st.total + 1
      else
        st.frozen = st.frozen + 1
      end
      st.L, st.cur = dn, run
      if run > st.longest then st.longest = run end
    else
      run = 0
    end
  end
  st.S = st.L
end

local function save_state()
  store(9, string.format('1 %d %d %d %d %d %d %d', st.L, st.S, st.cur, st.longest, st.total, st.freezes, st.frozen))
end

-- settle decides the days before day T that are not decided yet: while the
-- streak is alive each takes a freeze, as it would have at its cut-over,
-- until the freezes run out; then the streak is broken and later days take
-- none. It returns the days frozen (marked only if write).
local function settle(T, write)
  local out = {}
  if st.S >= T - 1 then return out end
  local from = math.max(st.L, st.S)
  if st.L ~= NONE and st.L >= st.S and st.freezes > 0 then
    local n = math.min(T - 1 - from, st.freezes)
    for dn = from + 1, from + n do
      if write then mark(dn, 4, 1) end
      out[#out + 1] = dn
    end
    if n > 0 then
      st.freezes, st.frozen, st.L = st.freezes - n, st.frozen + n, from + n
    end
  end
  st.S = T - 1
  return out
end

-- streak_at is the signed days of the run ending at signed day dn.
local function streak_at(dn)
  if dn == st.L then return st.cur end
  return back(dn)
end

-- fill signs day x (missed or frozen; a frozen day gives its freeze back),
-- records its daily reward and the bonuses the run through it now makes
-- due, and updates the state. It returns the run's signed days and the
-- points recorded.
local function fill(x, outbox, user)
  local was_frozen = frozen(x)
  local before
  if x - 1 == st.L then before = st.cur else before = back(x - 1) end
  if was_frozen then
    mark(x, 4, 0)
    st.frozen = st.frozen - 1
    st.freezes = math.min(st.freezes + 1, maxfreezes)
  end
  mark(x, 0, 1)
  st.total = st.total + 1
  local daily, bonus = tonumber(ARGV[12]), tonumber(ARGV[13])
  reward(outbox, user, date_of(x), 'daily', daily)
  local points, count, dn = daily, before, x
  -- Walk the run forward from x: every signed day's count is one more.
  while true do
    if signed(dn) then
      count = count + 1
      if count % every == 0 then
        reward(outbox, user, date_of(dn), 'bonus', bonus)
        points = points + bonus
      end
    end
    if dn >= st.L or not covered(dn + 1) then break end
    dn = dn + 1
  end
  if x > st.L then
    st.L, st.cur = x, count
  elseif dn == st.L then -- the run through x is the current one
    if was_frozen then st.cur = st.cur + 1 else st.cur = before + 1 + st.cur end
    count = st.cur
  end
  if count > st.longest then st.longest = count end
  if st.cur > st.longest then st.longest = st.cur end
  return count, points
end

-- frozen_list appends the days in out to the reply r.
local function with_days(r, out)
  for _, dn in ipairs(out) do r[#r + 1] = dn end
  return r
end
