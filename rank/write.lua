-- Apply score updates to one leaderboard shard.
-- KEYS[1] the shard's sorted set
-- ARGV[1] 2^timeBits: a member's stored value is score * ARGV[1] + rest
-- ARGV[2] the largest score allowed
-- ARGV[3] rest for this call's time: 2^timeBits - 1 - tick, so that at one
--         score whoever got there first (smaller tick) sorts higher
-- ARGV[4] absolute expiry in ms for the key, 0 for none
-- ARGV[5..] triples: mode ('s' set, 'a' add, 'b' keep best), member, value
-- Returns one integer per triple: the member's score after its update, or -1
-- when the update would leave 0..ARGV[2] (that update is not applied).
-- Updates apply in order; all scores are read with one ZMSCORE and all
-- changes written with one ZADD.
local span = tonumber(ARGV[1])
local maxScore = tonumber(ARGV[2])
local rest = tonumber(ARGV[3])

local members = {}
for i = 5, #ARGV, 3 do members[#members + 1] = ARGV[i + 1] end
local stored = redis.call('ZMSCORE', KEYS[1], unpack(members))

local cur, known = {}, {}   -- running score per member (nil: absent)
local changed, order = {}, {}
local out = {}
for n = 1, #members do
  local i = 5 + (n - 1) * 3
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
    out[n] = -1
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
end
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIREAT', KEYS[1], ARGV[4]) end
return out
