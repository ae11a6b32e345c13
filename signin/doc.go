// Package signin is daily check-in on Redis bitmaps, with streaks, make-up
// days and rewards granted exactly once.
//
// Seed: 1M DAU all signing within two hours (≈700 sign-ins/s at peak, 7,000
// reads/s), one bitmap per user per year — 366 bits, 46 bytes — 10 points a
// day and 100 more on every 7th consecutive day.
//
// Sign sets the day's bit, computes the streak and records the reward tasks
// in one Lua script (GETBIT then SETBIT from the client is not atomic; two
// concurrent sign-ins would both see "not signed"). Bit k of a user-year is
// 1 January + k, numbered as SETBIT numbers bits (bit 0 is the most
// significant bit of byte 0), in both layouts below. Streaks are counted
// backwards from the day — across month and year ends, up to two calendar
// years back — and restart after a gap. Days are the user's local days
// (Config.Location or UserLocation). Signing a day already signed changes
// nothing, so a sign-in go-redis resends after a lost reply is recorded once.
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
// (up to its last signed day), not its days.
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
// What a Redis failover can lose: the last acknowledged sign-ins and their
// outbox entries (a user may sign the same day again and be granted then).
// Granted points live in SQL and are never lost or doubled. Monthly Backup
// copies user-years into SQL rows (one per user and month, the same for both
// layouts); Restore rebuilds Redis from them.
//
// Make-up (补签): MakeUp fills a missed day within the window (7 days) with a
// card, recomputes the streak through the run the day joins, and records the
// bonuses the longer streak makes due — once each, as the ledger's unique key
// turns any repeat into a no-op.
//
// Cluster: users are spread over Buckets hash tags; a user's bitmaps (or
// hashes) and cards share the tag with the bucket's outbox stream and layout
// record, so each script touches one slot. A Service is safe for concurrent
// use.
package signin
