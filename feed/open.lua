-- open: create a reader's inbox as "building" so that fan-out starts
-- pushing to it before it is filled from the followees' outboxes.
-- KEYS[1] inbox
-- ARGV[1] active period in ms
-- Returns 1. Idempotent: an existing inbox keeps its marker and entries.
redis.call('ZADD', KEYS[1], 'NX', -1, '~')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
