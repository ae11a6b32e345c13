-- Apply score updates to one shard of an EncodingMember board.
-- KEYS[1] the shard's sorted set: score = the stored value (the score, or
--         its negation on an ascending board), member = prefix .. name
-- KEYS[2] the shard's encoding record: ARGV[4] as first written
-- KEYS[3] this call's request key: holds the reply for ARGV[5] ms, so a
--         replay of the call (a client retrying after a lost reply) gets the
--         first answer and changes nothing
-- KEYS[4] the shard's ties hash: name -> its member's 8-byte prefix
-- ARGV[1] the largest magnitude of a stored value (2^53 - 1)
-- ARGV[2] this call's prefix: its time, complemented, so that at one score
--         whoever got there first sorts greater (first in reverse order)
-- ARGV[3] absolute expiry in ms for the keys, 0 for none
-- ARGV[4] the writer's encoding
-- ARGV[5] how long the request key is kept, ms; 0: no request key
-- ARGV[6..] triples: mode ('s' set, 'a' add, 'b' keep the greater), name,
--         value (in stored values: already negated on an ascending board)
-- Returns one string per triple: the stored value after its update, or 'r'
-- followed by the unchanged one (0 when absent) when the update would leave
-- +-ARGV[1] (that update is not applied); an error when the shard was
-- written in another encoding.
-- Updates apply in order; all prefixes are read with one HMGET, all values
-- with one ZMSCORE, and the changes written with one ZREM, ZADD and HSET.
local keep = tonumber(ARGV[5])
if keep > 0 then
  local done = redis.call('GET', KEYS[3])
  if done then
    local out = {}
    for v in string.gmatch(done, '[^,]+') do out[#out + 1] = v end
    return out
  end
end
local encoding = redis.call('GET', KEYS[2])
if encoding and encoding ~= ARGV[4] then
  return redis.error_reply('rank: encoding mismatch: board written as ' .. encoding .. ', this writer uses ' .. ARGV[4])
end
if not encoding then redis.call('SET', KEYS[2], ARGV[4]) end

local limit = tonumber(ARGV[1])
local prefix = ARGV[2]

local names = {}
for i = 6, #ARGV, 3 do names[#names + 1] = ARGV[i + 1] end
local prefixes = redis.call('HMGET', KEYS[4], unpack(names))
local cur, old = {}, {} -- running value and stored prefix per name (nil: absent)
local present, at = {}, {}
for n = 1, #names do
  if prefixes[n] then
    present[#present + 1] = prefixes[n] .. names[n]
    at[#at + 1] = n
  end
end
if #present > 0 then
  local stored = redis.call('ZMSCORE', KEYS[1], unpack(present))
  for j, n in ipairs(at) do
    if stored[j] then
      cur[names[n]] = tonumber(stored[j])
      old[names[n]] = prefixes[n]
    end
  end
end

local changed, order = {}, {}
local out = {}
for n = 1, #names do
  local i = 6 + (n - 1) * 3
  local mode, name, value = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local c = cur[name]
  local new = value
  if mode == 'a' then new = (c or 0) + value end
  if mode == 'b' and c and c >= value then new = c end
  if new < -limit or new > limit then
    out[n] = 'r' .. string.format('%.0f', c or 0)
  else
    -- An unchanged score keeps the time it was first reached.
    if new ~= c then
      cur[name] = new
      if not changed[name] then order[#order + 1] = name end
      changed[name] = true
    end
    -- '%.0f' keeps all 53 bits: Lua 5.1 turns a number into "%.14g".
    out[n] = string.format('%.0f', new)
  end
end

if #order > 0 then
  local gone, add, ties = {}, {}, {}
  for _, name in ipairs(order) do
    if old[name] and old[name] ~= prefix then gone[#gone + 1] = old[name] .. name end
    add[#add + 1] = string.format('%.0f', cur[name])
    add[#add + 1] = prefix .. name
    ties[#ties + 1] = name
    ties[#ties + 1] = prefix
  end
  if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
  redis.call('ZADD', KEYS[1], unpack(add))
  redis.call('HSET', KEYS[4], unpack(ties))
end
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[3])
  redis.call('PEXPIREAT', KEYS[2], ARGV[3])
  redis.call('PEXPIREAT', KEYS[4], ARGV[3])
end
if keep > 0 then
  redis.call('SET', KEYS[3], table.concat(out, ','), 'PX', keep)
end
return out
