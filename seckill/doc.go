// Package seckill is a flash-sale stock gate: zero oversell, zero undersell,
// a per-user limit, orders created asynchronously, unpaid reservations
// released.
//
// Seeds: 5,000 units, 1M users at once, 1 per user; the Redis gate stops 99%
// of the traffic, Kafka shaves the write peak to what MySQL takes, and SQL
// makes the final deduction (UPDATE … SET available = available − qty WHERE
// sku = ? AND available >= qty).
//
// One order model: the gate is this package, the record is the order block
// (package order). The gate owns the Redis stock, the per-user quotas and the
// reservations; the orders, their stock in SQL, their payments, refunds and
// timeouts are order's. A buyer's reservation becomes an order through Kafka
// (HandleOrder), is paid as any order is (order.Service.StartPayment and the
// gateway's callback), and closes at the reservation's deadline by order's
// timeout; the gate then returns the units and the quota (ReleaseDue at the
// deadline, HandleOrderEvent at once for an order paid or cancelled before).
//
// Campaigns: Create records one in SQL and creates its SKU in the order block
// with the campaign's stock and price; Open returns it by id as a Sale whose
// rules (limit, buckets, window) are read from SQL once and cached — a
// campaign never changes — so no caller-built struct can bypass them.
//
// The gate: one Lua script call decides a batch of buyers (one, or many
// through a Batcher): for each it checks the limit and deducts stock, and for
// the batch it records the reservations (with their payment deadline) and
// appends the order event to the bucket's outbox stream — all or nothing. The keys of one
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
// Reservations are kept per batch (a call of the buy or take script): in
// the bucket's reservations hash, the batch's number maps to one record,
// "<home>;<slot>=<user>,<qty>;…" listing its open reservations by their slot
// (the buyer's place in the batch), and the due sorted set holds one
// deadline per batch, shared by its reservations. Closing a reservation
// removes its slot from the record; the record and its deadline go with the
// last slot. So a decision costs a few bytes of one record and no hash
// field, sorted-set member or retry check of its own. Reservation ids are
// "<campaign>-<bucket>-<batch>" for slot 0 and "…-<batch>.<slot>" for the
// others, the batch number from Config.IDs (a snowflake) passed into the
// scripts: never from a Redis counter, which a failover or a restart from an
// older snapshot rolls back. A take from another bucket is a batch of one
// with a number of its own. Reservation ids made by the per-reservation
// layout before it ("<campaign>-<bucket>-<n>", one hash field per
// reservation) parse as slot 0 of batch n, but their records do not: let a
// campaign's reservations settle before moving it to this version.
//
// Retries: go-redis sends a command again when its reply is lost (3 times by
// default), and a script that acted would act twice. Every script that
// changes state recognises its own second run: a buy by its batch number,
// whose answers (reservations and holds) it keeps in a per-bucket hash for
// Config.RetryWindow, a take by the batch's record, a quota return or a close
// by a record kept in that hash. So one Buy leaves
// one reservation and gets the first run's answer, whatever the client's
// retry settings. The order block makes its own SQL writes idempotent (by
// buyer and reservation id, by gateway transaction) and retries deadlocks.
//
// Coalescing: a Batcher folds the buyers waiting for one home bucket into one
// script call, deciding them in order (the same user twice included). Every
// buyer gets its own answer; batches form only under load. What a decision
// costs Redis is not the interpreter's speed (the same EVAL of a
// 10-million-step Lua loop takes 71–86 ms, median 78, on the server the
// figures below come from: BenchmarkDecisionCost's lua-loop-10M) but the Lua
// strings and table entries made for it, each allocated, interned and
// collected. So the caller builds the batch's record and order message as
// they would be with every buyer reserved, and a batch of new buyers all
// reserved — the usual one under load — makes none per buyer: its quotas are
// written as the pairs it was sent, its record and message are the caller's.
// Any other batch writes the quotas it computed and cuts its record and
// message out of the caller's, one slice per run of reservations. Calls of
// 256 new buyers on a loaded two-core machine cost 1.6–2.7 µs of script time
// per decision, median 1.7 (3.5–6.3, median 4.1, with the record and message
// built per reservation in Lua; 8 runs of each, alternated in one session; 21
// µs with a hash field, a sorted-set member and two retry checks per
// reservation), less than one unbatched Lua stock deduct (4.5–9.1 µs in the
// same runs). In instructions (callgrind): 9.8 thousand per decision in the
// script, from 26.5 (11.2 from 27.8 for all the server does for the call); a
// batch whose reservations are one run among other answers, 13.5–15.
//
// Orders: the outbox streams are relayed to Kafka (an outbox.Relay over
// Sale.Outboxes, keyed by bucket; entries are deleted only after the broker
// acknowledged, and wait while Kafka is down). The value is an OrderMessage,
// versioned JSON decoded strictly: a malformed one is ErrBadMessage and
// poison, skipped or dead-lettered by the consumer. HandleOrder creates the
// message's orders in one order.CreateBatch, each keyed by (buyer,
// reservation id) and due at the reservation's deadline — a redelivery
// changes nothing, and a recorded id arriving for the same buyer with another
// SKU or quantity is ErrIDConflict (poison), never taken for a redelivery —
// and order reserves the SQL stock, guarded by available >= qty: if Redis
// ever sold more than SQL holds, the extra orders are closed out of stock
// (order.ReasonOutOfStock; "rejected" below). SQL never records more units
// sold than there were.
//
// Release: batches wait in a per-bucket sorted set by deadline (a Redis
// delay queue; asynq would add a second queue system for one sorted set).
// ReleaseDue settles each open reservation of a due batch as its order says
// (a paid one or one closed by its order event is no longer in the record):
// it expires the unpaid
// order in SQL first (order.Service.Expire: the conditional UPDATE pending →
// closed races the callback's pending → paid and exactly one wins; order
// returns the units to SQL's stock), then returns the units to Redis with
// the buyer's quota, each once (the close script restocks only if the
// reservation is still open, and only its caller returns the quota). Money
// that arrives after the close becomes a refund in the order block, never
// "paid". HandleOrderEvent does the same at once for an order cancelled or
// paid before its deadline.
//
// Entrance: per-user and per-campaign rate limits through
// go-redis/redis_rate, before any stock is touched.
//
// What Redis can lose, and how it is found and repaired. Redis replicates
// asynchronously: a failover to a replica that missed the last writes, or a
// restart without persistence (or from an older snapshot), forgets decisions
// buyers were told about — reservations, quota counts, stock decrements and
// the outbox entries of those that were not relayed yet. SQL is the record:
//
//   - Nothing is oversold in SQL: the final deduction is guarded, so Redis
//     selling a forgotten unit again costs that second buyer a rejected
//     order, never a unit SQL does not have.
//   - A bucket whose state is gone entirely answers Buy with ErrStateLost
//     until Reconcile repairs it, rather than selling from nothing.
//   - Sale.Reconcile reports the differences (Report: drift of the stock,
//     lost buckets, unpaid orders without their reservation, closed ones
//     still open, quotas below what users' orders hold) and, with repair,
//     rebuilds Redis from SQL: stock = SQL's stock less the units in flight,
//     the pending orders' reservations with their deadlines (so they are
//     released or paid as usual), quotas raised to what each user's orders
//     and reservations hold (the reservations grouped again by batch, as
//     their ids say). Repairing during the sale is safe: the buckets
//     are fenced (new purchases wait, for a few milliseconds usually, two
//     seconds at most), then each is rewritten in one script only if no
//     script changed it since it was read (a version bumped by every
//     change), else read again.
//   - In flight: a reservation open in Redis whose order SQL has not recorded
//     is counted as in flight and kept (its event is in the outbox or in
//     Kafka). An event relayed to Kafka whose reservation Redis then lost is
//     invisible to Reconcile: after a failover, repair once the consumer has
//     caught up with the order topic; if such an event is consumed after the
//     repair, its units are sold twice in Redis (the second order is
//     rejected) and Reconcile should run again.
//   - What stays lost: a decision forgotten before its event was relayed has
//     no record anywhere. Its buyer holds an id that OrderOf answers with
//     ErrNotReady forever, and the unit is sold again. The window is the
//     replication lag at the failover (typically under a second).
//     Config.WaitReplicas closes most of it: each decision a buyer is told
//     about first waits (Redis WAIT) until that many replicas have it, so a
//     failover to one of them keeps it (Redis may still promote a replica
//     that missed it when several exist; WAIT is not consensus); a decision
//     the replicas did not confirm in time is returned with
//     ErrNotReplicated. It costs a replica round trip per decision call:
//     on a loopback cluster sharing two cores, one buyer per call went from
//     about 105 to 170 µs (BenchmarkBuyWait); the batcher pays it once per
//     batch.
//
// Databases: MySQL 8 / MariaDB 10.6+ ("mysql" driver) or SQLite ("sqlite",
// modernc.org/sqlite, one connection per pool), for the campaigns and, through
// order, the orders. The package links neither driver.
//
// Observability: the Service emits OpenTelemetry metrics and spans to
// Config.MeterProvider and TracerProvider, by default the global ones (a
// service that set OpenTelemetry up gets them with no casebook code; one
// that did not pays no clock read, no span and no
// allocation: a flag read per operation, 1.6 ns, internal/obs's
// BenchmarkOpUninstalled).
//
//	casebook.seckill.operation.duration  histogram (s)      casebook.operation, casebook.outcome, casebook.reason
//	casebook.seckill.operations          counter            the same
//	casebook.seckill.batch.size          histogram (buyers)  buyers decided per buy-script call of a Batcher
//	casebook.seckill.stock               gauge (units)       units left in Redis per campaign this process opened (read at collection)
//	casebook.seckill.reconcile.drift     gauge (units)       Report.Drift of the last Reconcile per campaign
//
// Operations are buy (Sale.Buy), buy_batched (Batcher.Buy), handle_order
// (HandleOrder) and reconcile; outcomes ok, refused, canceled and error;
// a refused buy gives its reason — sold_out, limit_reached, rate_limited,
// not_started, ended, invalid, no_campaign — and a refused handle_order is
// a poison message (reason poison). ErrNotReplicated and ErrStateLost are
// errors. Campaign gauges carry casebook.seckill.campaign (the campaign id);
// no attribute holds a buyer or a reservation id. Each operation is a span
// "seckill.<operation>" with its outcome as an attribute and, for an error,
// the error recorded. Cost, from BenchmarkObservability (batched buys from
// 512 goroutines on a local Redis, 2 cores, 4 runs of 2 s each; medians,
// runs vary ±20%): no provider 14.9 µs per buy, 8 allocations — the same
// allocations as before instrumentation; the SDK's metrics 16.3 µs, 8
// allocations; its tracer sampling every span 18.1 µs, 15 allocations
// (1.06 KB more per buy); both 20.1 µs. Sample spans (for example
// sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))) on a sale's hot
// path.
//
// A Service, a Sale and a Batcher are safe for concurrent use.
//
// Design notes, diagram and measured costs: docs/seckill.md in the repository.
package seckill
