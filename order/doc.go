// Package order records orders and payments: a one-way state machine,
// inventory reservations, idempotent payment callbacks, timeouts, shipments
// in parcels, refunds by amount and by order line, an SQL outbox and
// reconciliation against a gateway statement. It is the record of seed
// 004's e-commerce flow (seckill is its gate) and of the design course's
// order case [7,000 orders/s at a sale, about ten writes each].
//
// An order's life, every step safe to retry:
//
//	o, _ := svc.Create(ctx, order.NewOrder{User: "ann", RequestID: "checkout-1", Lines: lines})
//	p, _ := svc.StartPaymentRequest(ctx, o.ID, "wechat", "pay-1") // a double click: one attempt
//	svc.HandleCallback(ctx, cb)                                    // the gateway's report: paid
//	svc.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "wh-7", Lines: some}) // partly_shipped
//	r, _ := svc.RefundLines(ctx, o.ID, []order.Line{{SKU: "case", Qty: 1}}, "return", "rma-3")
//	svc.Ship(ctx, o.ID)                                            // the rest: shipped
//	svc.RefundPaid(ctx, r.RefundNo)                                // the money went back
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
// Shipments: ShipParcel ships some units of a paid order's lines, at most
// what each line has left (bought, not shipped, not refunded), idempotently
// by the parcel's request id; the order is partly_shipped while units are
// left and shipped (ShippedAt set, AutoComplete counted from it) when none
// are. Ship ships everything left as one parcel and, on an order already
// shipped, changes nothing, as it always did. Each parcel is one row and
// one EventParcel in the order's transaction: announced exactly once into
// the outbox (delivered at least once).
//
// Refunds: RequestRefund pays an amount back before anything shipped and
// returns no stock; RefundLines pays units of lines back at any time after
// payment — Qty × the line's price, exact, since an order's amount is the
// sum of its lines' (no order-level discounts or shipping fees to pro-rate)
// — and returns those units to stock: unshipped units first (they are
// cancelled), beyond them shipped ones (a return, requested once the goods
// are back). Per line, units refunded never exceed those bought; per order,
// every refund requested, by amount and by line, adds up to at most what
// was paid (a line refund worth more than is left is ErrRefundTooLarge);
// both are decided under the order's row lock, against its lines' counts
// and the sum of its refund rows, and a request id (shared by both kinds)
// makes each request apply once, concurrent twins and retries after a lost
// reply included. The stock of a line refund goes back in the SKU's
// inventory database after the commit, once per refund and SKU behind a
// barrier row, finished by a repeat of the request or by Sweep after a
// crash. Refunds of all that is left make the order refunding, RefundPaid
// makes it refunded once every fen went back; a partial amount refund
// paid back returns it to paid.
//
// States (Transitions, StateTable):
//
//	pending        → paid            payment succeeded
//	pending        → closed          timeout or cancel
//	paid           → partly_shipped  a parcel shipped some units
//	paid           → shipped         a parcel shipped every unit not refunded
//	partly_shipped → shipped         the last units shipped, or the rest were refunded
//	shipped        → completed       received or auto-complete
//	paid, partly_shipped, shipped, completed → refunding
//	                                 refunds requested reach the paid amount (from paid: any amount refund)
//	refunding      → paid            partial amount refund paid back, nothing else due
//	refunding      → refunded        full refund paid back
//
// Payments: one row per attempt. StartPaymentRequest is idempotent by
// (order, request id): a double click, or a retry after a lost reply, gets
// the same attempt; a new request id (or StartPayment) makes another
// attempt, and of several that collect, one pays and the rest are refunded. HandleCallback is idempotent by the
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
// unsettled and returns the units of line refunds it left unreturned. Redis holds nothing else here: losing it costs promptness,
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
// Migrate creates what is missing and nothing else: parcels, line refunds
// and payment request ids came as new tables, so an existing database is
// brought up to date online, and its orders (shipped whole before parcels
// existed included) take part in the new calls unchanged.
//
// # Observability
//
// The Service emits OpenTelemetry metrics and spans to
// Config.MeterProvider and TracerProvider, by default the global ones (a
// service that set none up pays no clock read, no span and no allocation:
// a flag read per operation, 1.6 ns, internal/obs's BenchmarkOpUninstalled):
//
//	casebook.order.operation.duration  histogram (s)        casebook.operation, casebook.outcome, casebook.reason
//	casebook.order.operations          counter              the same
//	casebook.order.callbacks           counter (callbacks)  casebook.order.callback.result
//	casebook.order.refunds             counter (refunds)    casebook.order.refund.result[, casebook.order.refund.kind]
//	casebook.order.overdue             gauge (orders)       pending orders past their payment deadline, not closed yet
//
// Operations (each a span "order.<operation>") are one per exported method:
// create, create_batch, by_request, get, get_many, user_orders, search,
// stats, daily, put_sku, create_sku, stock_of, reserve, confirm, cancel,
// holds, cancel_order, complete, run_due, expire, sweep, migrate,
// start_payment, start_payment_request, payment_of, handle_callback,
// serve_callback (one request to CallbackHandler), reconcile,
// recover_payments, request_refund, refund_lines, refund_paid, refunds,
// refund_of, ship_parcel, ship, parcels, relay_outbox and pending_events.
// Calls the Service makes to its own operations (Create's batch, a
// callback's stock confirmation, Sweep's closes, Reconcile's and
// RecoverPayments' callbacks, the handler's HandleCallback) are not counted
// again. Outcomes are ok, refused, canceled (the caller's context ended) and
// error; a refusal gives its reason: invalid, bad_cursor, not_found,
// illegal_transition, conflict, out_of_stock, hanging, refund_too_large,
// quantity, amount_mismatch and unknown_payment (ErrCallback), signature
// (a Verifier's refusal), too_large and method (CallbackHandler). A
// create_batch is counted by its worst result: an error if any order met
// one, else its first refusal, else ok.
//
// Callback results: paid, refund and failed (applied: the order paid, the
// money refunded, the attempt failed), replayed (a gateway transaction
// already decided: nothing written), amount_mismatch (amount or currency
// differ: recorded, refused), unknown_payment (nothing written), malformed
// (a body or fields that do not parse) and forged (a bad signature or
// timestamp at CallbackHandler) — every callback counted once, whichever
// way it came (HandleCallback, CallbackHandler, Reconcile,
// RecoverPayments). Refund results: requested, with kind amount
// (RequestRefund), lines (RefundLines) or payment (money a callback brought
// for an order that could not take it); replayed (a repeated request or
// RefundPaid that changed nothing); paid_back (RefundPaid marked it done).
// The overdue gauge is read at collection, one COUNT per order table on its
// (status, pay_deadline) index, 16 tables at a time, within 2 s (a reading
// that fails or times out reports nothing); the index reads only the rows
// it counts, so it costs little while RunDue and Sweep keep up, and a
// figure above zero for long means they do not. Close stops it. No
// attribute holds a user, an order, a payment or an amount.
//
// Cost, from BenchmarkTransition (a first callback: Pending → Paid) and
// BenchmarkCallbackDuplicate with no provider, before and after
// instrumentation (go test -run XXX -bench 'Transition|CallbackDuplicate'
// -benchtime 2000x -count 3 ./order/, local MariaDB and Redis, 2 cores
// shared with other work, five runs each): the same allocations (336–337
// per transition, 30 per duplicate callback) and bytes (17.4 KB, 1.03 KB);
// times within the runs' wide spread (a transition 1.5–2.8 ms before,
// 1.4–3.1 ms after; a duplicate callback 56–103 µs before, 46–140 µs after).
//
// # Concurrency
//
// A Service is safe for concurrent use, by many processes at once.
//
// Design notes, diagram and measured costs: docs/order.md in the repository.
package order
