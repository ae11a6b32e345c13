// Package signin is daily check-in on Redis bitmaps, with streaks, make-up
// days and rewards granted exactly once.
//
// Seed: 1M DAU all signing within two hours (≈700 sign-ins/s at peak, 7,000
// reads/s), one bitmap per user per year — 366 bits, 46 bytes — 10 points a
// day and 100 more on every 7th consecutive day.
//
// Sign sets the day's bit, updates the streak state, spends the freezes a
// gap takes and records the reward tasks in one Lua script (GETBIT then
// SETBIT from the client is not atomic; two concurrent sign-ins would both
// see "not signed"). Bit k of a user-year is 1 January + k, numbered as
// SETBIT numbers bits (bit 0 is the most significant bit of byte 0), in both
// layouts below. Signing a day already signed changes nothing, so a sign-in
// go-redis resends after a lost reply is recorded once.
//
// Days. A day is the user's local day (Config.Location or UserLocation)
// starting at Config.DayStart: with DayStart 4h a check-in at 00:30 counts
// for the evening before, so a late night neither breaks a streak nor signs
// the next day. The day of an instant is the date of its wall-clock time
// less DayStart, on the wall clock (a 23- or 25-hour day still begins at
// DayStart); where summer time skips DayStart the day begins after the gap,
// and where the clock is set back across DayStart the day goes on through
// the repeated hour (it never goes back). Service.DayOf states the rule and
// every call uses it: Sign, Today, MakeUp's window, Streak, Stats, freezes.
//
// Streaks and freezes. A run is consecutive days each signed or frozen; its
// streak is its signed days (frozen days keep it alive and add nothing).
// A user holds up to Config.MaxFreezes freezes (AddFreezes, de-duplicated by
// grant id). A freeze covers one missed day, automatically: each missed
// day that follows a covered one takes a freeze at its cut-over if one is
// held; once none is, the streak is broken and later missed days take none,
// even if freezes are granted afterwards. So the freezes held are spent on
// the first days of any gap, and a gap longer than them breaks the streak
// (Duolingo's rule): that is the one policy under which a daily sweep and a
// sign-in after the gap give the same result. The Service applies the rule
// lazily — every call that writes first settles the days before today,
// recording the frozen days in the same script; Stats counts what settling
// would do; ApplyFreezes settles one user now, for a cron that notifies —
// and a model test checks that it equals the eager rule. A frozen day later
// signed (MakeUp, or a late sign-in) gives its freeze back, up to the cap.
// Stats reports Current (the streak alive today, counting the freezes that
// will cover missed days), Longest and Total (signed days, frozen ones
// apart) kept in the user's state, updated in the same scripts: exact over
// the whole history, not recounted from days that have expired. Two limits:
// a run joined by a make-up to a run that began more than two calendar years
// before is counted with the days Redis still holds, and a sign-in more than
// a year before the user's latest day cannot join the current streak. A
// user signed before the state existed gets it, on the next call, from the
// days Redis holds (the last two calendar years and this one); upgrade every
// writer at once, since an older writer does not update it. Streak reads
// the stored days only (no freezes not yet applied).
//
// Layouts (Config.Layout). Bitmaps, the default, keeps each user-year as a
// string key set with SETBIT. Packed keeps it as a field, named by the user
// id, of a hash per (bucket, year, group) sized by Config.Users to about 64
// users: under hash-max-listpack-entries (128) and hash-max-listpack-value
// (64 bytes; user ids are limited to 64 bytes), Redis stores each hash as one
// listpack. The scripts read the field, set the bit in Lua and write it back,
// in the same single script. Measured by MEMORY USAGE (BenchmarkSign,
// TestPackedMemory; Redis 7.0, outboxes drained), a year signed through 31
// December costs 185 bytes as a bitmap key and, packed, 59-61 bytes with
// 8-digit numeric ids (a listpack stores them as integers) or 84 with
// 24-byte ids: about 58 bytes plus the id. At the seed's 1M users and three
// years kept that is 555 MB against 180-250 MB. Packed costs Redis about 6 µs more per sign-in (17.5 against 11.5
// µs of server time per Sign script; a raw SETBIT is 1.3 µs): 4 ms of server
// time per second at the seed's 700 sign-ins/s. A user-year costs its length
// (up to its last signed day), not its days. Each user's streak state
// (latest day, current, longest, total, freezes) adds 37 bytes packed
// (TestPackedMemory) or a small string key with Bitmaps; frozen days are
// user-years of their own, kept only for users who had one.
//
// Bitmaps stays the default although Packed is a third of the memory:
// namespaces written before layouts were recorded are bitmaps (a Packed
// default would read them as empty), and Packed must be sized — too few
// Users and hashes grow past the listpack limit into hash tables, costlier
// than bitmaps; ten times too many and hashes of a few users cost about 80
// bytes per user-year instead of 60. New deployments that know their size should choose
// Packed. The first write in each bucket records its layout (and Packed's
// sizing); a Service opened with another one gets ErrLayout from every call
// (Backup and Restore included) rather than reading nothing. A namespace
// from before that record has none until its first sign-in in each bucket:
// open it with Bitmaps. To change layouts, Backup the months kept and
// Restore them into a new namespace.
//
// Rewards: the script appends the tasks (daily, and bonus when due) to the
// bucket's outbox stream in the same step as the bit, so a task exists if and
// only if the day was newly signed. An outbox.Relay over Service.Outboxes
// publishes them (to Kafka through casebook/kafka, or any outbox.Publisher;
// at-least-once, deleting only acknowledged entries); Ledger.Handle, an
// outbox.Handler, consumes them and, in one SQL transaction, inserts a ledger
// row unique per (user, date, kind) and adds to the balance. Messages are
// keyed by user and carry a versioned JSON task (see DecodeTask); one that is
// malformed or names a user the ledger cannot store is outbox.ErrPoison, so
// consumers skip or dead-letter it and the rewards behind it go on. Redelivery, a relay crash
// between send and delete, replays and concurrent consumers all meet the
// unique row: each reward is granted exactly once, and none is lost while the
// outbox entry survives.
//
// What a Redis failover can lose: the last acknowledged sign-ins, freeze
// grants and spends, and their outbox entries (a user may sign the same day
// again and be granted then). A user's days and state share a slot and are
// written by one script, so what survives is consistent. Granted points
// live in SQL and are never lost or doubled. Monthly Backup copies signed
// user-years into SQL rows (one per user and month, the same for both
// layouts); Restore rebuilds the signed days from them, and the state from
// those on the next call. Freeze balances and frozen days are not backed
// up: a service that sells freezes records its grants in its own SQL.
//
// Make-up (补签): MakeUp fills a missed (or frozen) day within the window (7
// days) with a card, recomputes the streak through the run the day joins,
// and records the bonuses the longer streak makes due — once each, as the
// ledger's unique key turns any repeat into a no-op. A sign-in for a day
// before the user's latest (a lagging clock, a queued request) fills it the
// same way, without a card.
//
// Observability: a Service emits OpenTelemetry metrics and spans to
// Config.MeterProvider and TracerProvider, a Ledger to those given by the
// options LedgerMeterProvider and LedgerTracerProvider; by default both use
// the global ones. A service that set OpenTelemetry up gets them with no
// casebook code; one that did not pays no clock read, no span and no
// allocation (a flag read per operation, 1.6 ns: internal/obs's
// BenchmarkOpUninstalled).
//
//	casebook.signin.operation.duration  histogram (s)  casebook.operation, casebook.outcome, casebook.reason
//	casebook.signin.operations          counter        the same
//	casebook.signin.rewards.backlog     gauge (tasks)  reward tasks in the outbox streams, not yet relayed (Σ XLEN at collection)
//
// Operations are sign, make_up, add_cards, add_freezes, apply_freezes,
// stats, status, history, frozen_days, streak, month_count, backup and
// restore (Service), and grant, handle_reward, balance and entries
// (Ledger); outcomes ok, refused, canceled and error. A refusal gives its
// reason: invalid (ErrInvalidUser, or another bad argument — a card or
// freeze count below 1, a grant id, a day range), outside_window, no_card,
// already_signed, bad_task (Grant), already_granted and poison
// (handle_reward: a message that is ErrBadTask). A Sign of a day signed
// already answers AlreadySigned with no error and counts as refused,
// already_signed; a Grant answering false (granted before) counts as
// refused, already_granted; a reward message handled again is ok, as
// Handle answers. ErrLayout and backend errors are errors. No attribute
// holds a user id, a date or points. Each operation is a span
// "signin.<operation>" with its outcome as an attribute and, for an error,
// the error recorded. The backlog counts the tasks waiting for the relay;
// those published and not yet granted are the consumer's lag
// (casebook.kafka.consumer.lag). Each collection reads every bucket's
// stream length in one pipeline: Close a Service no longer used to stop
// it. Cost, from BenchmarkObservability (Sign with Bitmaps, one caller per
// core on a local Redis, 2 cores shared with another job, 3 runs of 1 s):
// no provider, 72 allocations (3.1 KB) per sign-in — exactly as many as
// before instrumentation; the SDK's metrics, 72 too; its tracer sampling
// every span, 79 (1.06 KB more). Medians of 59–93 µs per Sign, varying by
// a third between runs, hide the time each adds.
//
//	CASEBOOK_REDIS_ADDR=127.0.0.1:6379 go test -p 1 ./signin/ -run '^$' -bench Observability -benchtime 1s -count 3
//
// Cluster: users are spread over Buckets hash tags; a user's bitmaps (or
// hashes) and cards share the tag with the bucket's outbox stream and layout
// record, so each script touches one slot. A Service is safe for concurrent
// use.
//
// Design notes, diagram and measured costs: docs/signin.md in the repository.
package signin
