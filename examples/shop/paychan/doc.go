// Package paychan simulates a payment channel — a gateway in the style of
// WeChat Pay or Alipay — as a separate HTTP server, for seed 004's
// e-commerce flow: the shop (order.Service) asks it to collect, it calls the
// shop back, and the shop queries it and downloads its statement, all over
// HTTP, so a test or a load run exercises the same wire the shop would use
// against a real gateway.
//
// # What it does
//
// POST /pay {"pay_no":N,"amount":A,"currency":"CNY"} stands for a buyer
// paying: the channel records one collection for payment number N with a
// gateway transaction id of its own (unique across restarts: a random
// prefix per Channel and a counter), and schedules its callback. A repeated
// /pay for N answers the same collection and collects nothing twice; one
// with another amount or currency is refused (409). The callback is an
// order.Callback as JSON, POSTed to Config.NotifyURL and signed with the
// channel's RSA key exactly as order.SignRSA does (HeaderTimestamp and
// HeaderSignature over timestamp + "\n" + body), so order.RSAVerifier
// accepts it.
//
// GET /query?pay_no=N answers what the channel knows of N (an order.Callback,
// or 404); GET /statement?from=…&to=… answers a CSV statement
// (order.StatementHeader, one SUCCESS line per collection paid in
// [from, to)). Both answers are signed like callbacks; Client verifies them.
// Every other method (but HEAD, which net/http serves as a GET without its
// body) or path is refused; a malformed body, an unknown field,
// a payment number or amount below 1 or a body over MaxBody is 400 or 413
// and records nothing.
//
// # Delivery and faults
//
// A callback is retried until the shop answers 2xx, on Config.Retries
// (WeChat Pay's fifteen waits, 24 h 4 min in all, by default; Config.Scale
// shrinks them so that a run takes seconds). A 4xx answer means the shop
// refused the callback: it is not retried, and is recorded (Refusals). A 5xx
// answer, a timeout or a broken connection is retried; when the schedule
// runs out the callback is abandoned. At most Config.Senders callbacks are in
// flight at once.
//
// The faults a shop must survive are knobs:
//
//   - DropRate: the callback of a collection is never sent, not even
//     retried. Only the shop's active query (order.Service.RecoverPayments
//     with a Client) or its reconciliation against the statement
//     (order.Service.Reconcile) can find that money.
//   - DupRate: the callback is delivered twice, as two independent
//     deliveries each with its own retries; the shop must apply it once.
//   - Jitter: every delivery waits a random extra time, so callbacks arrive
//     out of order, a duplicate sometimes before its original.
//
// Which collections are dropped or duplicated, and every jitter, follow from
// Config.Seed and the payment number alone: the same seed and payment
// numbers give the same faults whatever order the payments come in.
//
// Stats counts collections, money collected and callbacks for a balance
// sheet; Collections = Dropped + Acknowledged + Refused + Abandoned +
// Pending at every instant. Wait blocks until no callback is pending.
//
// # Departures from a real gateway
//
// Everything is in memory: a restart forgets every collection. Every
// collection succeeds (there are no failed payments, refunds or closing of
// a payment at the gateway), in one currency (Config.Currency). The waits
// between retries are real time; Config.Now only stamps collections and
// signatures.
//
// A Channel and a Client are safe for concurrent use.
package paychan
