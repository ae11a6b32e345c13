// Package feed is a news feed: a social graph, posts, and timelines built by
// push (fan-out on write, in chunks through Kafka), pull (celebrities,
// merged at read time) and both at once, with cursor paging and deletes,
// profile pages (AuthorPosts), blocks, mutes and a per-reader read marker
// (SetMarker, UnreadSince).
//
// # Data
//
// SQL is the record. Posts live in the author's shard (the post id is an
// idgen gene id carrying the author's gene, from a segment leased from SQL,
// so it never repeats whatever Redis forgets). A follow is written twice:
// feed_follows in the follower's shard is the truth and carries a
// "mirrored" mark; feed_followers in the followee's shard (read by fan-out)
// is written after, then the mark is set. An unfollow marks the truth
// "unfollowing" first, then deletes the followee side, then the truth.
// Repair finishes every unmirrored row older than RepairGrace, so the two
// sides cannot diverge for longer than one Repair period. Blocks live in
// the blocker's shard; Follow checks both directions before and after its
// write, and Block writes the block before removing both follows, so one of
// two racing calls always sees the other. Unblock deletes the block and
// restores no follow. Mutes live in the muter's shard (feed_mutes) and
// touch no follow.
//
// Redis holds, per user (one hash tag "u:<user>", so every script's keys
// share a slot): the inbox (sorted set of post ids scored by time, capped at
// InboxCap, trimmed only past InboxCap+InboxSlack), the pushed list (the
// posts fan-out appended since the last read, capped alike), the outbox (the user's
// own recent post ids, capped at OutboxCap), the cached followees and
// muted sets, a generation counter (moved by every follow, unfollow, mute
// and unmute), the cached follower count and the read marker; and per post
// its cached detail. Posts are read through ristretto (LocalTTL) → Redis (CacheTTL)
// → SQL (one query per shard for a whole page), misses remembered at both
// levels for NegativeTTL, concurrent SQL reads of the same ids shared by
// singleflight.
//
// # Fan-out
//
// The posts table is the fan-out's outbox: a pushed post is written with
// fanout = 0, and RelayFanout (run it in a loop) reads its author's
// followers from SQL and publishes Chunk messages of ChunkSize followers
// (format documented on Chunk, version ChunkVersion), then marks the post.
// HandleChunk, an outbox.Handler for kafka.Consumer, pushes the post to
// every follower in one pipeline of RPUSHX to their pushed lists; each read
// moves its reader's pushed list into the inbox (read.lua) before reading
// it. Only active readers are pushed to: an inbox and its pushed list exist
// only for a reader who read within ActivePeriod (their TTL, refreshed by
// every read), and RPUSHX appends only to an existing list. A returning
// reader's inbox is opened first (fan-out pushes to it from then on) and
// then filled from the outboxes of the accounts followed, so no post is
// missed in between. Activate makes readers active in bulk (a migration,
// a fixture, a cohort about to return) by opening their inboxes without
// filling them: the next read fills them as a first read does, keeping
// what was pushed meanwhile (one script call per reader, no SQL; figures
// on Activate). Pushing with a plain command rather than a script per
// inbox costs the server a fraction of a ZADD per follower, which is what
// bounds a large fan-out; the sorting is paid at read, only by readers.
// BenchmarkMillionFollowers (local Redis 7.0, MariaDB, kfake, 8
// partitions, on a 2-core machine shared with other work): publish → the
// post in 1,000,000 active inboxes in 2.90 and 3.20 s on the quiet
// machine (load average 1.3, go test -run '^$' -bench
// 'MillionFollowers|FanoutFollowers' -benchtime 1x ./feed/, twice; setting
// them up: Activate 13.7 and 15.3 s, the SQL rows 4.6 and 5.0 s), 3.9–8.8 s
// while other work ran; 100,000 (BenchmarkFanoutFollowers) in 0.33 and 0.34
// s, 0.39–1.25 s loaded. It is CPU-bound on the 2 cores: the one Redis thread
// spent 2.3–6.0 s on the million pushes (2.2–2.5 µs per RPUSHX in INFO
// commandstats) and the consumers about 2.5 s (HandleChunk 1.5 s of it,
// in a CPU profile), so Redis Cluster primaries and consumer processes
// divide it. A pushed entry costs 32 bytes of Redis memory until the next
// read, an inbox entry 16 in a small (listpack) inbox; BenchmarkTimeline's
// inbox-B/entry is a large one's.
//
// Delivery is at-least-once end to end, and that is enough: a chunk
// applied twice changes nothing visible (an inbox is a set, scores come
// from the post; a duplicate in a pushed list collapses when moved), so a consumer killed before its offset commit, a redelivered
// message or a relay that publishes a post's chunks again duplicate nothing.
// Malformed chunks are poison (ErrBadMessage, outbox.ErrPoison).
//
// # Pull and hybrid
//
// Authors with at least Threshold followers are celebrities (a registry
// table, loaded by every process every RegistryRefresh); their posts are not
// fanned out but pulled from their outboxes at read time and merged with
// the inbox (duplicates removed, so an author's posts pushed before the
// promotion are shown once). The threshold formula is on Threshold. A new
// celebrity's posts stay pushed for 2×RegistryRefresh, until every process
// pulls them; authors are never demoted.
//
// # Reading
//
// Timeline merges the inbox page with the followed, unmuted celebrities'
// outboxes, cuts the merge where a truncated source stops, hydrates the
// page in one batched read, and drops deleted posts (their inbox entries are removed
// then, lazily), posts by accounts the reader no longer follows (so
// unfollow and block take effect at once, even for a chunk applied late)
// and posts by accounts the reader muted (a mute is a filter at read: the
// muted author's posts are still pushed to the muter's inbox, so Unmute
// shows them again at the next read; muting an account not followed is
// allowed and applies once it is followed).
//
// A page reads its sources' ids without their scores and orders them by
// the scores of the posts it reads anyway (from the process cache, in the
// steady state); only a post that no longer exists has its score read from
// its source (ZSCORE). Redis 7.0 formats each score of a WITHSCORES reply
// with snprintf: 27 ids of a celebrity's outbox cost 21.4 µs with their
// scores and 4.2 µs without (redis-benchmark -c 4, INFO commandstats). The
// harness's feed.read (20-post hybrid pages, 5 pulled celebrities; go run
// ./benchmarks -redis <private redis-server> -mysql <MariaDB> -only
// feed.read -duration 3s, alternating builds) went from 5.97k and 6.06k
// pages per core of Redis CPU to 9.70k, 11.3k and 8.94k (165 µs to 88–112
// µs per page): read.lua 57–67 µs a call, from 78–82; each outbox read 3.8–4.7
// µs, from 16.4–16.8. read.lua then stopped renewing the keys' lifetimes on
// every read (only once they have run down by 1/64 of ActivePeriod) and
// dropped its EXISTS calls (a present list or set is never empty): alone,
// on a steady-state reader (400 inbox entries, 25 followees; redis-benchmark
// -n 30000 -c 4 EVALSHA), 26.2 and 26.3 µs a call against 29.7 and 36.9.
// With 20 pulled celebrities (BenchmarkTimelineRedisCost, private Redis,
// -benchtime 2000x, two runs of each build alternating on a busy machine),
// a page costs Redis 244 and 255 µs of CPU, from 727 and 811: the
// celebrities' outbox reads 99–105 µs a page, from 604–619, read.lua 83–94,
// from 159–176. Most of what remained was those 21 reads of 27 ids (4.5–5
// µs each), so a process now keeps each pulled celebrity's newest ids in
// memory and, for a first page, reads only the outbox's version token (a
// GET): every outbox write sets a token no other write uses (outbox.lua for
// a post, Delete for a removal), so an unchanged token is an unchanged
// outbox, whatever the writer's clock — a post sorting below the head
// changes it too (TestPulledHeadsFollowOtherProcesses). A kept head lives
// at most LocalTTL, which bounds what a process writing outboxes without
// tokens (an earlier version, in a rolling upgrade) can leave unseen.
// Same benchmark, same conditions: 154 and 78 µs a page against 269 and
// 271 (the 20 GETs 5.7–12.6 µs a page; the machine was busy, so the spread
// is wide). Likewise a process keeps each reader's followees and mutes
// under a view token that read.lua sets when both sets exist and that every
// writer of either set drops (regraph.lua, following.lua, Mute and Unmute):
// a read presenting the token gets no SMEMBERS back
// (TestKeptViewsFollowOtherProcesses: mutes, unmutes, unfollows, follows and
// a block made by another process show at the next page). read.lua's time
// a page went from 96 and 77 µs to 60 and 34 (Redis CPU 170 and 142 µs to
// 143 and 78, same benchmark, busy machine). All of it, measured again on
// the quiet machine (load average 1.2), the release before against this
// one, alternating: 635 and 621 µs of Redis CPU a page against 167 and 120
// (outbox and inbox reads 406–430 µs a page against 4–5; read.lua 99–100
// against 38–53, now most of what is left). The harness's feed.read (5
// pulled celebrities): 5.75k and 6.92k pages per core of Redis CPU against
// 16.4k and 12.8k, so the plan's Redis for the seed's timeline reads went
// from 51 + 51 and 42 + 42 machines to 18 + 18 and 23 + 23.
//
// A script call costs Redis far more than the commands it runs: read.lua
// was 38–53 µs a page of which its commands took about 10. So a reader
// whose view this process keeps is read without it, in ONE pipeline of
// plain commands: the pushed list's head, the page's ids, the inbox's state
// marker and lifetime, then the view token and the kept celebrities'
// version tokens (one MGET on a single node; a GET each on a cluster) and
// the reads of the celebrity heads not kept (every head, on pages after
// the first). A cluster client that routes reads to replicas (ReadOnly,
// RouteByLatency, RouteRandomly) is never read this way: a replica may not
// have seen a token dropped yet.
// When the inbox is built, its lifetime not due for renewal and the view
// token unchanged, that is the page; posts pushed since the last read (up
// to 32) are read from the pushed list as a source of their
// own and left there, to be moved into the inbox by the read that finds
// more (or renews the keys). Otherwise read.lua runs as before, and the
// heads read are used when its view agrees. The reads need not be one
// transaction: the view token is read after the inbox, so an unchanged
// token means no follow, unfollow, block or mute came before the inbox
// was read; the pushed list is read before the inbox, so a push another
// read moves in between is seen twice (and collapses), never missed
// (TestSteadyReadsRenewKeys: the script still renews every key once due;
// TestPendingPushesServed: pushes served unmoved through a cursor walk, a
// push delivered twice shown once, a deleted one hidden, a long list
// moved; TestKeptViewsFollowOtherProcesses: a token another process set is
// told from the kept one). BenchmarkTimelineRedisCost (20 pulled
// celebrities, private Redis, -benchtime 1000x; the release before against
// this one, three pairs alternating, load average 1.1–1.3): a steady page
// 42–66 µs of Redis CPU against 114–125, a page with one post pushed since
// the last 60–80 µs against 133–175, a first read (page=first: the
// 2,000-post inbox rebuilt) 3,894–4,772 µs against 3,992–4,342 — the same,
// within the spread. The harness's feed.read (5 pulled celebrities, the
// command above, two pairs of runs alternating, twice): 35.0k and 36.5k
// pages per core of Redis CPU (27–29 µs a page) against 14.9k and 17.1k,
// then 29.0k and 25.1k (34–40 µs) against 13.4k and 11.8k — the machine's
// level moves between sets, the ratio stays 2.1–2.4× — so the plan's Redis
// for the seed's timeline reads is 8 + 8 and 9 + 9 machines against 17 +
// 17 and 20 + 20 in the first set. Those runs read one page at a time (the
// benchmark) or with 4 workers (the harness then), so Redis slept and woke
// for nearly every command and counted it; a serving process keeps it
// busy. page=steady/clients=16 reads from 16 goroutines: 13.0–20.0 µs of
// Redis CPU a page against 39.0–41.1 for the release before (one page at
// a time in the same runs: 20.3–30.0 against 40.4–56.3; three pairs
// alternating, load average 3–4 from other work, -benchtime 2000x), and
// the harness, which now runs 16 workers, 53.4k and 58.9k pages per core
// (17–19 µs) in the same hour, 72.7k (13.8 µs) in the reference profile.
// A first read stays 67–155 times a steady one (page=first, the same
// hour: 2,017 µs of Redis CPU, of which read.lua's evalsha 981 µs, the
// followees' outboxes read with their scores, ZREVRANGE, 718 µs, and the
// inbox written, ZADD, 468 µs).
//
// A first read within 3 times a steady page is out of reach for this
// reader by any design that shows it its followees' posts and keeps no
// inbox for readers who are away: with no inbox, the page must read each
// of its 50 pushed followees' outboxes at least once, while the
// celebrities' heads and the posts themselves cost what they cost on a
// steady page. The least such a read can cost Redis, measured on a private
// server by feed/testdata/first-page-bound.sh (50 outboxes of 40 posts,
// redis-benchmark -c 16 -P 50, INFO cpu around the run; three rounds,
// 2026-12-04, in the same hour as page=steady/clients=16 at 6.2, 19.8 and
// 17.2 µs a page and page=first at 2,463–2,941 µs): 7.3–7.9 µs a ZREVRANGE
// of a 20-post head with scores, 1.8–2.4 without, and 1.04–1.17 for the
// head entry alone. So even a design that read only each followee's newest
// post, once, and wrote nothing would add 52–59 µs to a steady page's work
// less its inbox reads (the page's ids, marker and lifetime, a few µs):
// about 3.5–9 times a steady page. One head apiece is not yet an exact
// page; reading each outbox's 20-post head with scores, the one-round way
// to be sure of the page, is 50 × 7.3 = 365 µs. A first read costs in
// proportion to the reader's followees, where a steady page does not; the
// only way to make it cheap is to push into the inboxes of readers who are
// away too, at 32 bytes of Redis memory per pushed entry per reader — the
// trade the hybrid design declines on purpose. Serving the first page from
// the outbox heads and filling the inbox later would bring it down to
// roughly the figures above, a change not made.
//
// AuthorPosts is an author's profile page, newest first, with Timeline's
// cursors (bound to the author's page) and deletes hidden: read from the
// author's outbox while it holds posts after the cursor, then from SQL
// (one indexed query in the author's shard, ix_profile), so the last page
// of a profile costs one SQL query. Blocks and mutes do not apply to it: it
// is the author's page and the call has no viewer.
//
// SetMarker(user, post id) moves a reader's read marker forward to a post's
// position (never back, so it is idempotent and two devices keep the
// newer); UnreadSince counts the entries newer than it with one ZCOUNT per
// source (the inbox and each followed, unmuted celebrity's outbox), reading
// no post: an upper bound of the unread posts Timeline would show, exact
// unless the inbox holds deleted posts not yet passed by a read, pushed
// posts of muted accounts or a post both pushed and pulled (UnreadSince
// names each case). The marker is a Redis value with the inbox's lifetime
// (ActivePeriod after it was last set); a failover that loses it makes
// UnreadSince count from the top.
//
// Measured on a shared 2-core machine against local Redis 7 and MariaDB
// (go test -run '^$' -bench 'BenchmarkTimeline|BenchmarkUnreadSince|BenchmarkAuthorPosts'
// -benchtime 2s ./feed with CASEBOOK_REDIS_ADDR and CASEBOOK_MYSQL_DSN set;
// p50, one run, so noisy): UnreadSince for BenchmarkTimeline's reader (2,000
// inbox posts, 20 pulled celebrities) 0.58 ms on one Redis, 0.64 ms on the
// cluster, 541 allocations, against 1.48 ms / 0.87 ms for the Timeline page
// it summarises; AuthorPosts of 20 posts 0.09 ms from the outbox (81
// allocations, posts in the local cache) and 1.76 ms past it from SQL
// (255). The mute filter costs Timeline one EXISTS and SMEMBERS in read.lua:
// 1,751 allocations per page in that run, 9 more than the 1,742 below.
// Cursors are an opaque (score, id) position: posts published later sort
// before it and never shift a page. With Config.CursorKey a cursor also
// carries a MAC over its position and reader, and one Timeline did not make
// for that reader is ErrCursor; without it a cursor is a position, not a
// secret (a malformed one is ErrCursor, a well-formed one is read from).
// A fan-out chunk carries only followers: the score pushed is the post's
// own, and a chunk that contradicts its post is poison. Scores are
// CreatedAt in ms × 1000 + the id's base mod 1000, so ties are rare; equal
// scores are ordered by id text, as Redis orders them.
//
// # Failures
//
// Inboxes, outboxes, followee sets and counts are caches: a Redis failover
// that loses writes loses pushes (a reader's inbox misses a post until it
// is rebuilt: delete the inbox, or it expires; an inbox whose pushed list
// was lost is rebuilt at the next read) and outbox entries (a
// celebrity's post is not pulled; publishing again with the same request id
// restores it). The generation counter makes a followee set read from SQL
// before a follow or unfollow and written after it fail instead of caching
// stale data. A delete writes a tombstone over the cached post; a reader's
// cache fill never overwrites one (SET NX). A failover that loses the
// tombstone but keeps the live entry shows the deleted post until CacheTTL;
// a delete in another process shows in this one for at most LocalTTL.
//
// # Observability
//
// The Service emits OpenTelemetry metrics and spans to
// Config.MeterProvider and TracerProvider, by default the global ones (a
// service that set none up pays no clock read, no span and no
// allocation: a flag read per operation, 1.6 ns, internal/obs's
// BenchmarkOpUninstalled):
//
//	casebook.feed.operation.duration  histogram (s)  casebook.operation, casebook.outcome, casebook.reason
//	casebook.feed.operations          counter        the same
//	casebook.feed.post.lookups        counter        casebook.cache.layer (local, redis, sql), casebook.cache.result (hit, miss)
//	casebook.feed.fanout.delay        histogram (s)  from a post's creation to one of its chunks pushed
//
// Operations (each a span "feed.<operation>") are publish, delete, post,
// timeline, author_posts, follow, unfollow, block, unblock, mute, unmute,
// followees, followers, follower_count, set_marker, marker, unread_since,
// repair, seed_follows, relay_fanout, handle_chunk, push and activate; refusals give
// a reason: invalid, cursor, not_found, blocked or poison (a bad fan-out
// message). Calls a block makes to its own operations (Block's unfollows,
// Publish's follower count) are not counted again. A post lookup is counted
// once per layer it reaches: a local miss is looked up in Redis, a Redis
// miss in SQL, and an SQL miss is a post that does not exist (a negative
// entry cached in Redis is a Redis hit). The largest fan-out delay of a
// post is its delay to the last inbox: with several consumers the
// histogram's upper buckets are the slowest chunks. No attribute holds a
// user or a post id. Cost, from BenchmarkTimeline and BenchmarkFanout with
// no provider, before and after instrumentation (same run, local Redis and
// MariaDB): the same allocations (1,742 per 20-post page; 7,046 per
// 500-follower push benchmark loop) and times within the runs' spread
// (606–622 µs against 601–617 µs per page).
//
// # Concurrency
//
// A Service is safe for concurrent use; Close stops the id lease and the
// registry refresh and is safe to call twice.
//
// # Seed and departures
//
// This implements the seed's feed design (publish to SQL sharded by gene
// id, push to capped inboxes, pull for celebrities, hybrid merge, chunked
// async fan-out, cursors, delete). Departures: inactive readers are not
// pushed to at all (Mastodon-style) instead of a low-priority queue, and are
// served by a rebuild on return; the celebrity threshold is derived from
// rates and a delay bound instead of a fixed number; the fan-out outbox is
// the posts table rather than a Redis stream, because a celebrity-scale
// fan-out reads followers from SQL anyway; follower counts are invalidated
// rather than incremented, so a retried command can never count twice.
//
// Databases: MySQL 8 / MariaDB 10.6+ ("mysql" driver) or SQLite ("sqlite",
// modernc.org/sqlite, one connection per pool). The package links neither
// driver.
//
// Design notes, diagram and measured costs: docs/feed.md in the repository.
package feed
