// Package seckill is a flash-sale stock gate: zero oversell, zero undersell,
// a per-user limit, orders created asynchronously, unpaid reservations
// released.
//
// Seeds: 5,000 units, 1M users at once, 1 per user; the Redis gate stops 99%
// of the traffic, Kafka shaves the write peak to what MySQL takes, and SQL
// makes the final deduction (UPDATE … SET n = n − qty WHERE sku = ? AND
// n >= qty).
//
// The gate: one Lua script per decision checks the buyer's limit, deducts
// stock, records the reservation (with its payment deadline) and appends the
// order event to the bucket's outbox stream — all or nothing. The keys of one
// bucket share a hash tag. Stock can be split over K buckets on different
// cluster slots (Campaign.Buckets) so that one hot item is not one hot key:
// a buyer's quota lives on its home bucket (user hash); when that bucket is
// empty the quota stays held and the buyer takes the unit from the next
// bucket that has one, and gives the quota back only if none has. So the
// limit holds exactly across buckets and no one is told "sold out" while a
// bucket still holds a unit (for qty 1; a multi-unit buy must fit in one
// bucket). A process dying between the two steps leaves a quota held without
// a unit: the buyer loses a try, no unit is lost or sold twice.
//
// Reservation ids are "<campaign>-<bucket>-<n>", n from Config.IDs (a
// snowflake) passed into the scripts: never from a Redis counter, which a
// failover or a restart from an older snapshot rolls back.
//
// Retries: go-redis sends a command again when its reply is lost (3 times by
// default), and a script that acted would act twice. Every script that
// changes state recognises its own second run: a buy or take by the
// reservation id the caller made, a hold, a quota return or a close by a
// record kept in a per-bucket hash for Config.RetryWindow. So one Buy leaves
// one reservation and gets the first run's answer, whatever the client's
// retry settings.
//
// Coalescing: a Batcher folds the buyers waiting for one home bucket into one
// script call, deciding them in order (the same user twice included). Every
// buyer gets its own answer; batches form only under load.
//
// Orders: the outbox streams are relayed to Kafka (an outbox.Relay over
// Sale.Outboxes, keyed by campaign, entries deleted only after the broker acknowledged; while Kafka is
// down they wait). HandleOrder creates the order row — the reservation id is
// its primary key, so redelivery is harmless, and a recorded id arriving with
// another buyer, campaign or quantity is ErrIDConflict (poison), never taken
// for a redelivery — and deducts the SQL stock in
// the same transaction, guarded by n >= qty: if Redis ever sold more than SQL
// holds (a failover lost decrements), the extra orders are Rejected. SQL never
// records more units sold than there were.
//
// Release: reservations wait in a per-bucket sorted set by deadline (a Redis
// delay queue; asynq would add a second queue system for one sorted set).
// ReleaseDue settles each due one in SQL first: the conditional UPDATE
// pending → released races Pay's pending → paid and exactly one wins; a
// release returns the units to SQL's stock in that transaction, then to
// Redis with the buyer's quota, each once (the reservation is removed
// atomically with the restock; the quota return is keyed by reservation id).
// A payment that arrives after the release gets ErrReleased: refund it.
//
// Entrance: per-user and per-campaign rate limits through
// go-redis/redis_rate, before any stock is touched.
//
// Reconcile compares Redis stock plus reservations SQL has not recorded with
// SQL's stock, and lowers an overstated Redis stock.
//
// Campaigns: Create records one in SQL; Open returns it by id as a Sale whose
// rules (limit, buckets, window) are read from SQL once and cached — a
// campaign never changes — so no caller-built struct can bypass them.
//
// A Service, a Sale and a Batcher are safe for concurrent use.
package seckill
