-- open: create a reader's inbox as "building" so that fan-out starts
-- pushing to it before it is filled from the followees' outboxes.
-- KEYS[1] inbox, KEYS[2] pushed (the list fan-out appends to; "~" first)
-- ARGV[1] active period in ms
-- Returns 1. Idempotent: an existing inbox keeps its marker and entries, an
-- existing pushed list its entries.
redis.call('ZADD', KEYS[1], 'NX', -1, '~')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('RPUSH', KEYS[2], '~')
end
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
