-- Lease the next range of a segment counter.
-- KEYS[1] the counter (the last id handed out by any lease)
-- ARGV[1] step: how many ids to lease
-- Returns the new counter value: the lease is (value - step, value].
return redis.call('INCRBY', KEYS[1], ARGV[1])
