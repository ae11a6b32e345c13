-- Read one bucket at one instant, for Reconcile.
-- KEYS[1] version   KEYS[2] stock   KEYS[3] reservations (batch records)
-- KEYS[4] due (batch deadlines)
-- KEYS[5] quota
-- Returns {version, stock, reservations, due, quota}: version and stock are
-- nil when absent, the others flat lists (field, value / member, score).
return {
  redis.call('GET', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('HGETALL', KEYS[3]),
  redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES'),
  redis.call('HGETALL', KEYS[5]),
}
