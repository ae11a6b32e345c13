// Package hotlist is a trending list (a "hot list", 热搜): every view, like,
// repost and comment moves an item's heat, and the list shows the hottest
// items, refreshed every few minutes. Events come from a Kafka topic
// partitioned by item, are pre-aggregated in memory per partition, flushed
// into Redis exactly once, ranked, published and served from a local cache.
//
// # Events
//
// An Event is (item, kind, time, optional user). A kind's weight comes from
// Config.Weights (DefaultWeights: view 0.005, like 0.5, repost 1, comment
// 13.5); weights that are negative, NaN or infinite are refused by New.
// Producers send events in batches, many to a Kafka message, in a versioned
// binary encoding (AppendBatch, DecodeBatch; the format is in event.go):
// EncodeMessages groups events by partition (PartitionOf, the hash
// partitioner casebook/kafka uses) and keys each message so that it lands on
// the partition of every item in it.
//
// # Heat models
//
// Decay (the default) is forward decay (Cormode, Shkapenyuk, Srivastava and
// Xu, ICDE 2009): an event of weight w at time t adds w·2^((t−L)/HalfLife)
// once, against a landmark L. Nothing is multiplied on a timer; the stored
// sum times 2^((L−now)/HalfLife) is the naive Σ w·2^(−age/HalfLife), which the
// tests recompute for every item and compare order and heat with. Landmarks
// are RescaleEvery half-lives apart (64): once the clock passes one, a
// partition's flushes build the next landmark's set chunk by chunk
// (RescaleChunk items a flush), write new increments into both sets, and
// switch readers atomically when the copy is complete — the factor between
// landmarks is a power of two, so the copy is exact, and readers never see a
// half-moved set. While a partition keeps up, a stored heat stays within
// 2^(2·RescaleEvery) per unit of weight (2^128), far from float64's 2^1024;
// a partition idle for over 900 half-lives starts afresh (everything on it
// had decayed below 2^-900 of a new event).
//
// Window is a ring of Slots slots of SlotLength (12 × 5 min): an item's heat
// is the weighted sum (SlotWeights) of its events in the live slots. An event
// stops counting exactly when its slot leaves the ring, by the reader's
// clock; slot sets expire by TTL a slot later, never by a sweep. Each
// partition also keeps its window's totals as a sorted set, built for the
// coming slot during the current slot's last minute (chunk by chunk, each
// total summed afresh from the slot sets, increments written to both) and
// used from that slot's first instant. A reader whose slot has no built set
// (the aggregators stopped, or are behind) sums the slots itself, exactly,
// with Fagin's threshold algorithm: the same answer, but Top(100) over 64
// partitions of 12 full slots then takes about 100 ms on Zipf-like traffic
// and a few hundred in its worst case, instead of about 1.5 ms. Items whose
// heat is exactly 0 may be missing from a built set.
//
// # Aggregation, exactly once into Redis
//
// Kafka partition p is Redis hash tag {Name:p}: every key of a partition
// (meta, heat sets, slots, like sets) shares one cluster slot, and Claim.Add
// rejects an item of another partition (ErrWrongPartition), so an item's heat
// never straddles partitions and the global top is an exact k-way merge of
// the partitions' tops. An Aggregator's Claim sums a partition's events per
// item (per slot) in memory and flushes them in ONE script call that also
// stores the partition's last applied Kafka offset (a large Decay batch
// made from the claim's copy of its heat set goes in one MULTI under WATCH
// instead, with the same fence: "Bounded memory" below). The call carries the
// offset the claim started from and applies only if Redis still holds it; if
// its last offset is at or below the stored one it changes nothing and
// succeeds (a retry after a lost reply — go-redis resends it — or a replay);
// if another consumer stored offsets past it, or Redis holds an older offset
// than it started from, it changes nothing and the claim closes with
// ErrResync. A flush that fails is retried as the very same batch while new
// messages wait in another. So no event counts twice or goes missing,
// whatever Kafka redelivers after a crash, a rebalance or a replay; Kafka's
// committed offsets may lag (hotlist/hotkafka marks them after each flush and
// starts each partition at Redis' offset).
//
// A Redis failover can lose the last flushes: a script's writes replicate as
// one transaction, so a replica that missed them has an older heat and the
// matching older offset. The claim's next flush finds the offset behind the
// one it started from (ErrResync), and hotkafka restarts the partition at
// Redis' offset, moving Kafka's committed offset back: the lost events are
// read again from Kafka and counted once. Only events Kafka no longer
// retains are lost for good. A snapshot lost in a failover is replaced at the
// next Refresh; pins and blocks lost with it must be set again.
//
// Bad input never blocks a partition: a batch that does not decode is
// rejected whole (ErrMalformed, marked outbox.ErrPoison), events that cannot
// count (unknown kind, time beyond the aggregator's clock plus MaxSkew, item
// of another partition, like without a user under DedupLikes) are left out
// (ErrRejected); both are counted (Aggregator.Stats) and the offset moves
// past them. Whether an event counts, and in which slot, is decided by the
// aggregator's clock when it is consumed; slot and like sets expire by the
// Redis server's clock, which should agree within a slot.
//
// # Bounded memory and the error it allows
//
// A partition keeps its Keep hottest items (10,000); under Window each slot
// set does, and the window's totals — the weighted sums of the slot sets,
// kept equal to them — hold their union, up to Slots × Keep. After each
// flush the coolest beyond Keep are trimmed and lose their heat (in that
// slot, under Window): an item that comes back is underestimated by what it
// had when trimmed, which was at most the Keep-th heat of its partition (of
// its slot) at that moment. An increment that trimming would drop at once —
// its item absent from a full set and below the set's lowest score — is not
// written at all. An item is trimmed only when Keep items of its partition
// are hotter, so under Decay it never leaves while it is in the list's top
// Keep (and Top needs n ≤ Keep); under Window only if Keep items beat it
// within one slot. The tests check the top 100 of a Zipf stream against a
// model that forgets exactly the trimmed events, and that no item was
// trimmed while in the untrimmed top 100. A claim holds at most MaxPending
// entries between flushes (it is due early).
//
// Under Decay a claim decides itself which increments the script would not
// admit, and does not send them (Stats.Unsent). It is the only writer of
// its partition (the offset fence), so it keeps a copy of the heat set,
// every member and score as each flush's reply leaves them, and sends the
// script each admitted item's new score, the very double the script would
// compute; the reply says which likes were new (DedupLikes), for the copy
// to add them as the script did. The script checks that the copy is of its
// current set and that no build is under way, and each reply is checked
// against the copy (size, lowest score). On any doubt — a failed or
// replayed flush, a landmark's rebuild, a new claim — the copy is dropped,
// that flush sends increments as before and its reply brings the members
// back. The copy costs about 60 bytes per member with 12-byte ids (0.6 MB
// per claimed partition at the default Keep). TestHeatCopyChangesNothing
// feeds two lists the same stream, one with the copy and one without, and
// finds the same members with bit-identical scores after every flush,
// through restarts, a resync, a lost reply and a landmark, with likes
// deduplicated or not. Window flushes send increments as before.
//
// A batch of at least 128 item entries without likes is not sent to the
// script at all: the claim WATCHes the meta hash and the heat set, reads the
// stored offset and epoch and the set's size (or, holding no copy, the whole
// set, which becomes its copy), and — when they are what the claim holds —
// writes the new scores with one ZADD, trims with ZRANGE and
// ZREMRANGEBYRANK, stores the offset and reads the size and lowest score
// back, in one MULTI. A partition never flushed is started at the batch's
// landmark, as the script would. The writes are the script's, and so is the
// fence: a write to either key between the read and EXEC aborts the
// transaction. In a script each ZADD pair cost Redis 1.12–1.39 µs here,
// against 0.70–0.74 µs for ZADD itself: every argument becomes a Lua string
// and then a Redis string again (BenchmarkZaddScriptOrNative, 7,000-pair
// batches into a set of 10,000–20,000 members, INFO commandstats on a
// private redis-server: CASEBOOK_REDIS_ADDR=… go test -run '^$' -bench
// ZaddScriptOrNative -benchtime 50x -count 3 ./hotlist/). A landmark passed,
// a build under way, an aborted transaction, a lost EXEC reply (go-redis
// never resends a transaction on another connection, where its WATCH would
// be gone) or any other error drops the copy and sends the batch to the
// script, whose fence resolves it (Stats.Fallbacks counts them); after three
// error replies in a row (a proxy or an ACL without WATCH or MULTI) the
// claim stops trying transactions, and the next claim tries again.
// TestNativeFlushFaults starts a partition, restarts the claim, passes a
// landmark, loses an EXEC's reply, writes between the read and the EXEC,
// refuses the WATCH, has a zombie claim start and finish a landmark's move,
// rolls a transaction back as a failover would and has another consumer
// overtake the claim, and after each compares the set and meta bit for bit
// with a list fed through the script.
//
// DedupLikes counts one Like per user per item per DedupWindow. It costs a
// Redis set entry per distinct (item, user) like, kept for up to two
// DedupWindows: about 60 bytes plus both ids per entry (10M likes an hour
// with 12-byte ids is some 0.85 GB per hour of likes).
//
// # Reading
//
// Top(n) is live and exact: each partition's best few (2n/Partitions + 4) in
// one pipelined script call per partition, merged, and a second round only
// for partitions whose last item made the cut. Publish stores the top
// SnapshotSize with each item's rank change since the previous snapshot
// (compare-and-set, so concurrent publishers never mix); RunPublisher does it
// every Refresh. TopCached serves the latest snapshot from an atomic pointer,
// read from Redis at most once per CacheTTL: it is at most CacheTTL + Refresh
// + the flush interval + the consumers' lag behind the events. Pin and Block
// are operators' controls applied at read (Snapshot, TopCached).
//
// # Concurrency
//
// List and Aggregator are safe for concurrent use; a Claim belongs to one
// goroutine (one per partition, as a consumer group gives). Nothing here
// starts a goroutine except RunPublisher (until its context ends) and a
// timer per cache refresh.
//
// # Observability
//
// A List and its Aggregators emit OpenTelemetry metrics and spans to
// Config.MeterProvider and TracerProvider, by default the global ones (a
// service that set none up pays no clock read, no span and no
// allocation: a flag read per operation, 1.6 ns, internal/obs's
// BenchmarkOpUninstalled):
//
//	casebook.hotlist.operation.duration  histogram (s)    casebook.operation, casebook.outcome, casebook.reason
//	casebook.hotlist.operations          counter          the same
//	casebook.hotlist.events              counter          casebook.hotlist.list, casebook.hotlist.result: aggregated, rejected, expired
//	casebook.hotlist.messages            counter          the list; result malformed (poison) or duplicate (skipped redelivery)
//	casebook.hotlist.flushes             counter          the list; result applied or replayed (a retry found applied)
//	casebook.hotlist.flushed.entries     counter          the list: item entries in applied flushes
//	casebook.hotlist.resyncs             counter          the list: claims closed with ErrResync
//	casebook.hotlist.flush.fallbacks     counter          the list: Decay flushes meant for a transaction that the script made (Stats.Fallbacks)
//	casebook.hotlist.flush.lag           gauge (s)        the list: age of the oldest event an open claim holds unflushed, 0 when none
//	casebook.hotlist.claims              gauge            the list: open claims of the Aggregator
//
// Operations (each a span "hotlist.<operation>") are top, snapshot (also
// TopCached's read when its copy is stale), publish, claim, flush, pin,
// unpin, block and unblock; refusals give a reason: invalid (ErrInvalid),
// no_snapshot, conflict (ErrPublishConflict) or closed (ErrClosed); an
// ErrResync is an error. Claim.Add, per message, records nothing: its
// counts are the Aggregator's Stats, read at collection, as are the lag and
// the claims (an Aggregator registers them at NewAggregator and Close
// unregisters them; run one Aggregator per list per process). TopCached's
// hit, about 2 ns here, is not counted: any counter costs more than it.
// The list's name (chosen by the operator) is the only attribute beside the
// fixed sets; no item or user is.
//
// # Departures from the seed
//
// The seed counts at least once and recomputes hot scores on a timer; here
// the flush is exactly once (offset fence in the script) and decay needs no
// timer (forward decay), so a list does not go stale when a job stops. The
// window is kept exact without sweeps. The seed's 4.17M events/s peak is ten
// times what its own inputs give (the benchmark harness flags it); one
// aggregator does several million events a second in memory on two cores,
// and end to end the partitions share Redis' single thread (the flushes). A
// flush reads a partition's current scores of its items with one ZMSCORE per
// thousand and writes the sums with one ZADD per thousand (the same doubles
// ZINCRBY would compute; a new item's score is its increment as sent)
// instead of a ZINCRBY per item; under Decay a claim holding a copy of its
// heat set sends the sums themselves, which the script passes to ZADD as
// they are, and leaves out what the set would not admit (above). hotkafka's
// BenchmarkIngest (2M events, Zipf over 5M items, 8 partitions, through
// kfake; raw sarama consumption of the same messages is its baseline in the
// same run) measures the whole path. On 2026-12-05, a private redis-server
// flushed before each run, the release before this one's changes, the one
// with CaughtUpFlush, and the one with the WATCH transaction too, alternated
// four times (CASEBOOK_REDIS_ADDR=<private redis-server> go test -run '^$'
// -bench Ingest -benchtime 1x ./hotlist/hotkafka/, one test binary each):
// 0.52–0.75 × raw (median 0.53), 0.60–0.75 × (0.66) and 0.70–0.81 × (0.74),
// with Redis' main thread at 0.26–0.28, 0.25–0.27 and 0.15–0.17 µs of CPU
// per event (INFO cpu) and 35–36% busy in the last. A consumer that has
// drained its partition flushes CaughtUpFlush after its last flush instead
// of up to FlushEvery (200 ms in the benchmark) later: that is the step from
// the first figures to the second. What limits ingestion now is the consumer
// side on the same two cores (kfake, sarama, decoding and summing), not
// Redis. What Redis still does is per admitted item: its ZADD and, for a
// newcomer, its trim. A bounded exact top-K per partition is used rather
// than a sketch: RedisBloom's TOPK takes no weights and, by its own
// benchmark, recalls 65–67% of the top while leaders change. The sarama glue
// lives in hotlist/hotkafka, not in casebook/kafka, because the aggregator
// needs each message's partition and offset, which outbox.Handler does not
// carry; hotlist itself links no Kafka client.
//
// Design notes, diagram and measured costs: docs/hotlist.md in the repository.
package hotlist
