// Package rank is a real-time leaderboard on Redis sorted sets.
//
// A Board ranks members by an integer score and, at equal scores, by who
// reached the score first — exactly, not by float rounding. Each stored value
// is score × 2^TimeBits + (2^TimeBits − 1 − tick), where tick counts
// Resolution steps since the board's Epoch; the whole value stays within the
// 53 bits a float64 holds exactly, so scores are limited to
// 0..2^(53−TimeBits)−1 (MaxScore) and writes are accepted only during
// [Epoch, Epoch+Lifetime). A score or time outside those ranges is rejected
// with ErrScoreRange or ErrTimeRange, never rounded. With the defaults (1 ms
// resolution, 30-day lifetime, 32 time bits) scores go up to 2,097,151; a
// daily board holds 2^26−1. Members reaching one score within the same
// Resolution are ordered by member name, greater first, as Redis orders
// equal values.
//
// Set, Add and Best run as one Lua script on the member's shard (read, decide,
// write atomically); Apply sends many updates as one script call per shard
// per 256 updates, pipelined. The time comes from the caller's clock
// (Config.Now), not Redis' TIME: the shards of one board may live on
// different servers, whose clocks would disagree about who was first.
//
// Retries: every write script call carries a request id and leaves its reply
// beside the shard for ReplayWindow (30 s), so a call that go-redis sends
// again after losing its reply — or that the caller repeats with ApplyOnce and
// the same id — returns the first answer and adds nothing twice.
//
// Encoding: Epoch, Lifetime and Resolution decide how a stored value decodes,
// so the first write stores them beside each shard; a Board configured
// otherwise (another process, a changed deploy) gets ErrEncodingMismatch on
// its writes (checked in the script) and reads (checked once per Board) instead
// of silently misordering ties or misreading scores.
//
// Sharding: with Shards = N the board is N sorted sets chosen by member hash,
// each under its own hash tag so a Redis Cluster spreads them. Reads send
// every shard plain commands, pipelined (go-redis sends each cluster node its
// share in parallel), and no script. Rank is exact: 1 + the members ahead on
// every shard, two ZCOUNTs per shard (values above, values equal) and names
// only from the rare shards holding another member at the very same value.
// Top, Around and Page ask each shard for a few entries (Around by index,
// around the spot the counts give), merge (k-way), and read more only from
// the shards whose last entry still made the cut. Results are identical to a
// single sorted set's — the tests drive N = 1, 7 and 64 against an in-memory
// model.
//
// Around keeps its window 2k+1 long at the ends of the board, shifted
// inwards, as podium does (around the first member with k = 10: ranks 1 to
// 21).
//
// A read spanning N shards pays per shard: a 64-shard Rank sends 129
// commands where a one-shard Rank sends 2, and costs some 15 times its CPU,
// client and Redis together, and one more round trip; a 64-shard Around
// some 12 times a one-shard one. No exact count over 64 sorted sets can do
// much better: one bare ZCOUNT per shard (zcount-64 in
// BenchmarkRankVsPodium) already costs 10 times a one-shard Rank. Use as
// few shards as the write load and the set size allow.
//
// TopCached serves the top from process memory, refreshed at most once per
// Staleness (1 s) by one of the concurrent readers. Periodic hands out daily,
// weekly or monthly boards in a time zone, expiring after a retention.
//
// Redis is the record here: a failover can lose the last acknowledged writes
// (the Redis Cluster specification says so). Feed boards from an event log you
// can replay if scores are worth money.
//
// A Board is safe for concurrent use.
package rank
