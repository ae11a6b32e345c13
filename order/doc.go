// Package order records orders and payments: a one-way state machine,
// inventory reservations, idempotent payment callbacks, timeouts, an SQL
// outbox and reconciliation against a gateway statement. It is the record
// of seed 004's e-commerce flow (seckill is its gate) and of the design
// course's order case [7,000 orders/s at a sale, about ten writes each].
//
// # Guarantees
//
// The database is the guard. Every status change is a conditional UPDATE
// (WHERE id = ? AND status = ? AND version = ?) in one transaction with an
// outbox row; Transitions lists every edge, and anything else is
// ErrIllegalTransition and changes nothing — except a step the order has
// already taken, repeated: Ship on a shipped order, Complete on a completed
// one, CancelOrder on a closed one and a callback for a payment already
// applied return the order as it is and change nothing, so a retry after a
// lost reply, or a redelivered event, is harmless. No lock or mutex in Go
// decides.
//
// Sharding: orders, their payment attempts, callbacks and refunds live in
// N databases × M tables by user (the seed's 8 × 8): an order number (and a
// payment or refund number) is an idgen gene id carrying the user's gene,
// so Get reads exactly one table and a callback's whole transaction — the
// payment, the order, the callback record, a refund, the outbox row — is in
// one database. Numbers come from an SQL-leased segment: they never repeat,
// whatever Redis forgets.
//
// Inventory is sharded by SKU (available / locked / sold), so an order and
// its reservations are in different databases. Reserve / Confirm / Cancel
// are TCC steps behind a barrier table keyed by (order, SKU): a repeated
// step changes nothing, a Cancel before its Reserve records itself and
// releases nothing (null compensation), and a Reserve after its Cancel is
// refused (ErrHanging). Reservations use
// UPDATE … SET available = available − q WHERE available >= q: stock never
// goes below zero and available + locked + sold is constant.
//
// Create is idempotent by (user, request id). It writes the pending order
// first, then reserves each SKU, then marks the order reserved; only a
// reserved order can be paid. A crash between the steps is finished by a
// repeat of the request or closed at the deadline (its Cancel then fences
// off any late Reserve).
//
// Payments: one row per attempt. HandleCallback is idempotent by the
// gateway's transaction id (the first delivery records its outcome; every
// repeat reads it back and writes nothing). A callback must match the
// attempt's amount and currency, or it is refused (ErrCallback) and
// recorded. Money for an order that is closed, already paid by another
// attempt, or not reserved becomes a refund request — never "paid" — and a
// close racing a payment is decided by the same conditional UPDATE: exactly
// one wins. CallbackHandler checks the signature over the raw body bytes
// (HMACVerifier, or any Verifier such as RSA) and its timestamp window.
//
// Timeouts: pending orders close after PayTimeout (30 min) and shipped ones
// complete after AutoComplete (10 days), through Redis sorted-set delay
// queues (RunDue) with Sweep as the backstop when Redis lost an entry or a
// process died between two steps; Sweep also settles stock a crash left
// unsettled. Redis holds nothing else here: losing it costs promptness,
// never correctness.
//
// Events: each transition writes an Event to its database's outbox table in
// the same transaction; RelayOutbox publishes unsent rows with SELECT … FOR
// UPDATE SKIP LOCKED and marks them sent. It never tracks an id watermark,
// the trap where rows of a transaction that commits late are skipped. Delivery
// is at-least-once; events carry a unique id for consumers to de-duplicate.
//
// Reconcile compares a gateway statement with the payments over a window
// (use at least the gateway's callback retry schedule, 24 h 4 min for
// WeChat Pay): missed callbacks are applied, other differences written once
// to the order_review table.
//
// Operators' queries: Search (by status and creation window, every table
// at once, merged newest first, by cursor), Stats over a window and Daily
// per local day (one grouped query per table). With Config.ReadReplicas
// they read one replica per database, so a scan of 64 tables does not load
// the primaries; everything else stays on the primaries.
//
// Throughput (BenchmarkCreate, BenchmarkCreateBatch, beside a raw one-row
// INSERT in the same run; MariaDB, Redis and the client sharing 2 cores):
// the raw INSERT reached 6.0k rows/s, Create 0.1× that and CreateBatch
// 0.47× (2.8k orders/s). CreateBatch makes three commits per database per
// batch — the orders and events, the reservations, the reserved marks —
// since an order and its SKU's stock live in different databases. The log
// flush is not what bounds it (innodb_flush_log_at_trx_commit=2 was no
// faster); the shared CPU is.
//
// Databases: MySQL 8 / MariaDB 10.6+ through the "mysql" driver, or SQLite
// through "sqlite" (modernc.org/sqlite; one connection per pool, no SKIP
// LOCKED needed with one writer). The package links neither driver.
//
// A Service is safe for concurrent use, by many processes at once.
package order
