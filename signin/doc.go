// Package signin is daily check-in on Redis bitmaps, with streaks, make-up
// days and rewards granted exactly once.
//
// Seed: 1M DAU all signing within two hours (≈700 sign-ins/s at peak, 7,000
// reads/s), one bitmap per user per year — 366 bits, 46 bytes — 10 points a
// day and 100 more on every 7th consecutive day.
//
// Sign sets the day's bit, computes the streak and records the reward tasks
// in one Lua script (GETBIT then SETBIT from the client is not atomic; two
// concurrent sign-ins would both see "not signed"). Bit k of a year's bitmap
// is 1 January + k, numbered as SETBIT numbers bits (bit 0 is the most
// significant bit of byte 0); MonthCount passes BIT to BITCOUNT, whose ranges
// are otherwise bytes. Streaks are counted backwards from the day — across
// month and year ends, up to two calendar years back — and restart after a
// gap. Days are the user's local days (Config.Location or UserLocation).
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
// What a Redis failover can lose: the last acknowledged sign-ins and their
// outbox entries (a user may sign the same day again and be granted then).
// Granted points live in SQL and are never lost or doubled. Monthly Backup
// copies bitmaps into SQL rows (one per user and month); Restore rebuilds
// Redis from them.
//
// Make-up (补签): MakeUp fills a missed day within the window (7 days) with a
// card, recomputes the streak through the run the day joins, and records the
// bonuses the longer streak makes due — once each, as the ledger's unique key
// turns any repeat into a no-op.
//
// Cluster layout: users are spread over Buckets hash tags; a user's bitmaps
// and cards share the tag with the bucket's outbox stream, so each script
// touches one slot. A Service is safe for concurrent use.
package signin
