-- Count one visit of a link with a visit limit, once per request: run again
-- with the same request (go-redis re-sends a call whose reply was lost), it
-- returns the first run's answer and counts nothing.
-- KEYS[1] the link's visit counter
-- KEYS[2] this request's marker
-- ARGV[1] the limit
-- ARGV[2] visits already recorded in SQL, to seed a missing counter; ""
--         when the caller has not read them yet
-- ARGV[3] counter lifetime in ms
-- ARGV[4] marker lifetime in ms
-- Returns the visit's number; -1 when the limit is used up (the counter then
-- stays at the limit); -2 when the counter is missing and ARGV[2] is "".
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[2] == '' then return -2 end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
local n = redis.call('INCR', KEYS[1])
if n > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  n = -1
end
redis.call('SET', KEYS[2], n, 'PX', ARGV[4])
return n
