-- marker: move a reader's read marker forward, never back.
-- KEYS[1] marker ("score:id" of the newest post the reader has read)
-- ARGV[1] score, ARGV[2] post id (decimal, no leading zeros), ARGV[3] TTL in ms
-- Returns 1 when the marker moved, 0 when it already stood there or later.
-- Idempotent.
local function less(a, b) -- decimal texts without leading zeros
  return #a < #b or (#a == #b and a < b)
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local score, id = string.match(cur, '^(%d+):(%d+)$')
  if score and (less(ARGV[1], score) or (ARGV[1] == score and not less(id, ARGV[2]))) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
return 1
