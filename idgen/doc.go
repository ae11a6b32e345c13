// Package idgen issues distributed ids and short codes.
//
//   - Snowflake: 63-bit time-ordered ids through bwmarrin/snowflake, 4096 per
//     millisecond per node, node id (0..1023) from configuration. Within a
//     process ids never repeat even if the wall clock steps back (bwmarrin
//     runs on the monotonic clock). Across restarts an optional Checkpoint
//     stores a reservation of time ahead (1 s by default); a restarted node
//     waits until its clock passes the reservation, or fails with
//     ErrClockBackwards when that is more than MaxClockWait away, instead of
//     silently repeating ids. bwmarrin's Generate busy-waits (holding its
//     lock) for the next millisecond when 4096 ids were taken in one: a node
//     tops out near 4M ids/s by design. Close cancels and waits for a
//     background renewal of the reservation.
//   - Base62: EncodeBase62 / DecodeBase62 over 0-9A-Za-z; decoding rejects
//     empty input, foreign characters and values above 2^64-1.
//   - Segment ("号段", Meituan Leaf's segment mode): ranges of ids leased from
//     SQL (SQLSource, one row per tag, upserted and read back in one
//     transaction; transactions rolled back for a deadlock, a lock wait
//     timeout or a busy SQLite run again with jittered backoff until ctx
//     ends) or Redis (RedisSource, INCRBY), double buffered — the next lease is fetched in
//     the background once 10% of the current one is used — so Next is one
//     atomic add in the steady state. The step adapts as in Leaf: a lease
//     used up sooner than LeaseTarget (15 min) doubles the next, up to
//     MaxStep; one that lasted over twice the target halves it, down to
//     Step; so the prefetch finishes in time whatever the demand (at a
//     starting step of 1,000, Next costs 1.6× a bare atomic add, from 41×
//     with a fixed step). Close cancels and waits for the
//     background fetch. Any number of allocators (processes)
//     sharing a source never hand out the same id; ids of one allocator
//     increase, ids across allocators interleave, and a stopped process
//     leaves gaps.
//   - ShortCodes: fixed-length (7 by default) non-sequential codes — a keyed
//     Feistel permutation of a counter over exactly [0, 62^Length), base62
//     padded. Distinct counters give distinct codes and codes decode back.
//     The key is required: with a known key (zero, say) anyone could list
//     the codes in the order they are issued.
//   - Genes: ids carrying a shard number in their low bits ("基因法"), with
//     the gene of a key taken from the same xxhash shard routing uses.
//
// Departures from the seeds: a 64-bit snowflake id is 11 base62 characters,
// not the 6 some write-ups promise; short codes come from a permuted counter
// instead. RedisSource is offered for speed but a
// Redis failover can lose an INCRBY and repeat a range; SQLSource is the
// default choice where ids must never repeat.
//
// Databases (SQLSource): MySQL 8 / MariaDB 10.6+ ("mysql" driver) or SQLite
// ("sqlite", modernc.org/sqlite, one connection per pool). The package links
// neither driver.
//
// All types are safe for concurrent use.
package idgen
