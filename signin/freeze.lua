-- Give a user freezes, once per grant id, up to the cap, after settling the
-- days before today with the freezes held until now.
-- KEYS and ARGV[1..15] as in days.lua, KEYS[12] the user's grant ids (a
-- sorted set scored by the server's time in ms).
-- ARGV[16] today   ARGV[17] freezes to add   ARGV[18] the grant id
-- ARGV[19] how long a grant id is remembered, ms
-- Returns {status, freezes held, days frozen now…}: status 0 added, 1 the
-- grant was applied before; an error when the bucket holds another layout.
local mismatch = open_layout(KEYS[10], ARGV[2], ARGV[1])
if mismatch then return mismatch end
load_state()
local froze = settle(tonumber(ARGV[16]), true)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[12], '-inf', now - tonumber(ARGV[19]))
local status = 1
if redis.call('ZADD', KEYS[12], 'NX', now, ARGV[18]) == 1 then
  status = 0
  st.freezes = math.min(st.freezes + tonumber(ARGV[17]), maxfreezes)
  redis.call('PEXPIRE', KEYS[12], ARGV[19])
end
save_state()
return with_days({status, st.freezes}, froze)
