-- Apply score updates to one shard of an EncodingPacked board.
-- KEYS[1] the shard's sorted set
-- KEYS[2] the shard's encoding record: ARGV[5] as first written
-- KEYS[3] this call's request key: holds the reply for ARGV[6] ms, so a
--         replay of the call (a client retrying after a lost reply) gets the
--         first answer and changes nothing
-- ARGV[1] 2^timeBits: a member's stored value is score * ARGV[1] + rest
-- ARGV[2] the largest score allowed
-- ARGV[3] rest for this call's time: 2^timeBits - 1 - tick, so that at one
--         score whoever got there first (smaller tick) sorts higher
-- ARGV[4] absolute expiry in ms for the keys, 0 for none
-- ARGV[5] the writer's encoding (epoch, lifetime, resolution)
-- KEYS[4] the shard's migration state (a hash): while it exists a Migrate
--         is copying the shard into KEYS[5] and KEYS[6], and every change
--         written here is written there too, as EncodingMember
-- KEYS[5] the copy's sorted set (score, prefix .. member)
-- KEYS[6] the copy's ties hash (member -> prefix)
-- ARGV[6] how long the request key is kept, ms; 0: no request key
-- ARGV[7] the copy's prefix for this call's time: Epoch + tick, exactly,
--         as Migrate converts a stored value
-- ARGV[8..] triples: mode ('s' set, 'a' add, 'b' keep best), member, value
-- Returns one integer per triple: the member's score after its update, or
-- -1 - its unchanged score (0 when absent) when the update would leave
-- 0..ARGV[2] (that update is not applied); an error when the shard was
-- written with another encoding.
-- Updates apply in order; all scores are read with one ZMSCORE and all
-- changes written with one ZADD.
local keep = tonumber(ARGV[6])
if keep > 0 then
  local done = redis.call('GET', KEYS[3])
  if done then
    local out = {}
    for v in string.gmatch(done, '[^,]+') do out[#out + 1] = tonumber(v) end
    return out
  end
end
local encoding = redis.call('GET', KEYS[2])
if encoding and encoding ~= ARGV[5] then
  return redis.error_reply('rank: encoding mismatch: board written with ' .. encoding .. ', this writer uses ' .. ARGV[5])
end
if not encoding then redis.call('SET', KEYS[2], ARGV[5]) end

local span = tonumber(ARGV[1])
local maxScore = tonumber(ARGV[2])
local rest = tonumber(ARGV[3])

local members = {}
for i = 8, #ARGV, 3 do members[#members + 1] = ARGV[i + 1] end
local stored = redis.call('ZMSCORE', KEYS[1], unpack(members))

local cur, known = {}, {}   -- running score per member (nil: absent)
local changed, order = {}, {}
local out = {}
for n = 1, #members do
  local i = 8 + (n - 1) * 3
  local mode, member, value = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if not known[member] then
    known[member] = true
    if stored[n] then cur[member] = math.floor(tonumber(stored[n]) / span) end
  end
  local c = cur[member]
  local new = value
  if mode == 'a' then new = (c or 0) + value end
  if mode == 'b' and c and c >= value then new = c end
  if new < 0 or new > maxScore then
    out[n] = -1 - (c or 0)
  else
    -- An unchanged score keeps the time it was first reached.
    if new ~= c then
      cur[member] = new
      if not changed[member] then order[#order + 1] = member end
      changed[member] = true
    end
    out[n] = new
  end
end

if #order > 0 then
  local args = {}
  for _, member in ipairs(order) do
    -- '%.0f' keeps all 53 bits: Lua 5.1 turns a number into "%.14g".
    args[#args + 1] = string.format('%.0f', cur[member] * span + rest)
    args[#args + 1] = member
  end
  redis.call('ZADD', KEYS[1], unpack(args))
  if redis.call('EXISTS', KEYS[4]) == 1 then
    local prefix = ARGV[7]
    local olds = redis.call('HMGET', KEYS[6], unpack(order))
    local gone, add, ties = {}, {}, {}
    for n, member in ipairs(order) do
      if olds[n] and olds[n] ~= prefix then gone[#gone + 1] = olds[n] .. member end
      add[#add + 1] = string.format('%.0f', cur[member])
      add[#add + 1] = prefix .. member
      ties[#ties + 1] = member
      ties[#ties + 1] = prefix
    end
    if #gone > 0 then redis.call('ZREM', KEYS[5], unpack(gone)) end
    redis.call('ZADD', KEYS[5], unpack(add))
    redis.call('HSET', KEYS[6], unpack(ties))
    if tonumber(ARGV[4]) > 0 then
      redis.call('PEXPIREAT', KEYS[5], ARGV[4])
      redis.call('PEXPIREAT', KEYS[6], ARGV[4])
    end
  end
end
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
  redis.call('PEXPIREAT', KEYS[2], ARGV[4])
end
if keep > 0 then
  local reply = {}
  for n = 1, #out do reply[n] = string.format('%.0f', out[n]) end
  redis.call('SET', KEYS[3], table.concat(reply, ','), 'PX', keep)
end
return out
