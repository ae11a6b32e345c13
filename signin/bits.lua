-- (shared header, prepended to every script at load time)
-- A user-year is a string of bits: bit k is 1 January + k, the (k % 8)-th
-- most significant bit of byte k / 8 (SETBIT/GETBIT numbering). In the
-- 'bitmaps' layout it is the string key KEYS[ki]; in 'packed/<n>' it is the
-- field named by the user in the hash KEYS[ki]. (Arithmetic rather than the
-- bit library, which not every Lua host has.)
local function isset(s, k)
  local b = string.byte(s, math.floor(k / 8) + 1)
  if not b then return false end
  return math.floor(b / 2 ^ (7 - k % 8)) % 2 == 1
end

-- withbit returns s with bit k set to v (0 or 1), zero-padded as SETBIT
-- pads.
local function withbit(s, k, v)
  local i = math.floor(k / 8) + 1
  if #s < i then s = s .. string.rep(string.char(0), i - #s) end
  local b = string.byte(s, i)
  local m = 2 ^ (7 - k % 8)
  local set = math.floor(b / m) % 2 == 1
  if v == 1 and not set then b = b + m elseif v == 0 and set then b = b - m end
  return string.sub(s, 1, i - 1) .. string.char(b) .. string.sub(s, i + 1)
end

local packed, field = false, nil
local years = {} -- user-years read so far, by key index

-- open_layout checks the bucket's layout key against the caller's layout
-- (recording it on the bucket's first write unless readonly) and picks how
-- user-years are read and written. It returns an error reply when they
-- differ: nothing may be read or written then.
local function open_layout(key, layout, user, readonly)
  local stored = redis.call('GET', key)
  if stored and stored ~= layout then
    return redis.error_reply('signin: layout mismatch: data written as ' .. stored .. ', this Service uses ' .. layout)
  end
  if not stored and not readonly then redis.call('SET', key, layout) end
  packed, field = string.sub(layout, 1, 7) == 'packed/', user
  return nil
end

-- load returns the user's value in KEYS[ki] ('' when none).
local function load(ki)
  if years[ki] == nil then
    if packed then
      years[ki] = redis.call('HGET', KEYS[ki], field) or ''
    else
      years[ki] = redis.call('GET', KEYS[ki]) or ''
    end
  end
  return years[ki]
end

-- store writes the user's value v into KEYS[ki].
local function store(ki, v)
  years[ki] = v
  if packed then
    redis.call('HSET', KEYS[ki], field, v)
  else
    redis.call('SET', KEYS[ki], v)
  end
end

-- setbit sets bit k of the user-year in KEYS[ki] to v (default 1) and
-- returns its old value.
local function setbit(ki, k, v)
  v = v or 1
  local s = load(ki)
  local old = isset(s, k) and 1 or 0
  if old == v then return old end
  years[ki] = withbit(s, k, v)
  if packed then
    redis.call('HSET', KEYS[ki], field, years[ki])
  else
    redis.call('SETBIT', KEYS[ki], k, v)
  end
  return old
end

-- A reward event: key = user, value = the reward message, format version 1.
local function reward(outbox, user, date, kind, points)
  local msg = cjson.encode({v = 1, user = user, date = date, kind = kind, points = tonumber(points)})
  redis.call('XADD', outbox, '*', 'k', user, 'v', msg)
end
