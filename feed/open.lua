-- open: create a reader's inbox as "building" so that fan-out starts
-- pushing to it before it is filled from the followees' outboxes (by
-- rebuildInbox at once, or by the next read for Activate).
-- KEYS[1] inbox, KEYS[2] pushed (the list fan-out appends to; "~" first)
-- ARGV[1] active period in ms
-- Returns 1 when it created either key (the reader was not active), else 0.
-- Idempotent: an existing inbox keeps its entries, and its marker unless
-- the pushed list is missing (lost in a failover: the pushes made meanwhile
-- are lost too, so the inbox is "building" again, to be filled); an
-- existing pushed list keeps its entries. Both get the active period as TTL.
local created
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZADD', KEYS[1], -1, '~')
  redis.call('RPUSH', KEYS[2], '~')
  created = 1
else
  created = redis.call('ZADD', KEYS[1], 'NX', -1, '~')
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return created
