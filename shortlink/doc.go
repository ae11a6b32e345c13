// Package shortlink is a TinyURL-class link shortener: Shorten,
// ShortenMany, Resolve, Update, History, Delete, Stats, an owner's listing
// by tag (List), per-link analytics (Clicks, Breakdown, Uniques), a public
// redirect handler (RedirectHandler) and a JSON API handler that acts for
// the owner a service's authorizer names (APIHandler).
//
// Seed: 1M new links a day, 100 reads each (≈3,500 reads/s at peak), 300
// bytes a record, 110 GB a year, 256 tables. Storage is SQL through shard
// (256 tables in one database by default, or N × M); codes are fixed-length
// permuted codes from idgen (7 characters: 3.5e12 codes) or, as an option,
// base62 snowflakes (11 characters). The permutation's key is a secret —
// with it, one code gives away the next ones — so it is never a constant:
// unless Config.CodeKey sets one, a random key is drawn on first use and
// stored in SQL, where all processes of the deployment find the same one. A code's table follows from the code, so
// the primary key makes every code — custom aliases included — unique across
// all tables, also when two callers race for one alias (exactly one wins).
//
// Reads go through an in-process ristretto cache (LocalTTL, 10 s), then
// Redis (RedisTTL, 24 h), then SQL. Misses are remembered at both levels for
// NegativeTTL, and concurrent misses of one code share one Redis read and one
// SQL query (singleflight). Creating or deleting a link drops it from Redis
// and from this process's cache at once; other processes may serve a deleted
// link for up to LocalTTL.
//
// Editing: Update changes a link's destination (validated as Shorten's),
// expiry, visit limit or redirect status, as an actor; clicks and visits
// spent are kept, and expired or used-up links can be revived. Each change
// makes a new Link.Version and a Revision (who, when, the settings before
// and after) in one SQL transaction with the link, in a history table
// beside the link's table (links_007_history next to links_007: the same
// database, so one local transaction, sharded as the links are); History
// reads it newest first. Update.IfVersion is a compare-and-set: of editors
// racing from one version exactly one wins and the others get ErrConflict,
// and an Update sent again after a lost reply succeeds without applying
// twice. Cache bound: when Update returns, Redis and this process's cache
// hold the new version; other processes serve the old one for at most
// LocalTTL (counted from the end of a lookup they had in flight). Redis
// entries carry the version and are written by a compare-and-set script,
// so a reader that read the old row and fills Redis after the edit
// cannot put it back; an edit never removes an entry, so it never makes a
// live code look missing.
//
// Tags and listing. A link carries up to MaxTags tags (Options.Tags,
// Update.Tags), stored normalised: trimmed, lower-cased, de-duplicated and
// sorted; an edit of them is a version and a Revision like any other. List
// returns an owner's links newest first, all or one tag's, by pages of up
// to MaxListPage behind an opaque cursor (HMAC-signed with a key stored in
// SQL, bound to the owner and tag: any other is ErrInvalidCursor).
//
// Owner index: one row per owned link with the empty tag, and one per tag,
// in tables of its own (links_owner_000 …, as many as the link tables, on
// the same databases), an owner's rows all in the table its hash picks,
// under the primary key (owner, tag, created_at, code), so a page is a
// backwards range read of that key. A link and its index rows are usually
// in different tables, often different databases, so no transaction covers
// both. Instead an index row is written before the link change that wants
// it commits (Shorten writes the link's rows before inserting it, Update a
// new tag's row before committing the edit); a listing reads the links
// after the rows, from SQL, and shows a row only if its link exists with
// that owner, that created_at and (for a tag) that tag; and a row is
// deleted (by Delete, by an edit dropping a tag, by a listing meeting an
// invisible row) only when it was last written more than a minute ago, so
// a change on its way to commit keeps its row provided it commits within
// that minute (as read by the processes' clocks, which must agree well
// within it). So a listing never shows a link that is not there or not the
// owner's, and a created link always appears. Unowned links are not
// indexed, and List needs an owner.
//
// A List page of n costs one range query reading at most n+1 index rows
// and one query per database holding any of those links (the point reads
// of their tables by primary key, joined by UNION ALL; databases in
// parallel): with one database two queries and at most 2(n+1) rows read.
// Invisible index rows cost further rounds of the two, at most four a page,
// and a DELETE each once a minute old.
// Shorten of an owned link costs one statement more (its index rows, one
// multi-row upsert). Migrate creates the index and, the first time, fills
// it from the links that exist (one pass over every link table); links an
// older version makes after that are not indexed.
//
// ShortenMany makes up to MaxBatch links, each as Shorten would, and
// returns a Result per request in order: not all or nothing — a bad item
// changes nothing and the others are still made.
//
// Numbers are bounded before use: a link expires (TTL or ExpiresAt, to the
// millisecond) after now and at most MaxLifetime (100 years) ahead; a visit
// limit is at most MaxVisitLimit (2^53-1, exact in the counter's Lua
// arithmetic); Config durations are not negative (but LocalTTL, which turns
// the local cache off), limits and sizes are positive.
//
// Redirects are 302 by default: browsers cache a 301 for good, and clicks
// stop being counted. 301 (or 307/308) is opt-in per link or per service,
// with Cache-Control max-age capped at the link's expiry. Clicks are counted
// in memory and written every FlushEvery as one UPDATE per link — never a row
// UPDATE per redirect, which caps a hot link at a few dozen redirects a second
// in YOURLS. A crash loses at most one interval of counts; a failed flush is
// tried again with the next, so an UPDATE that committed but whose reply was
// lost counts its clicks twice (clicks are statistics, and a visit counter
// re-seeded from them errs on the side of fewer visits).
//
// Only a visit counts: HEAD (ResolveOptions.Peek) answers as GET would
// but counts no click and spends no visit.
//
// Domains (Config.Domains; none by default). A deployment may serve
// several short domains: the host of BaseURL is the default, and each of
// Config.Domains is another. A link belongs to one (Options.Domain,
// Link.Domain, "" for the default) and the same code may be taken on
// each. A link on the default domain is stored exactly as before domains
// existed, under its code; a link on another is stored under its key,
// code + "~" + 8 hex digits of the domain's SHA-256 (Service.Key), so
// that its row, its Redis entries, its caches, clicks, analytics, unique
// visitors, history and owner-index rows are all keyed apart from the
// same code's on another domain, with no change to any table. The cost:
// an alias off the default domain is at most 55 characters (the key must
// fit the code column), and a domain's links resolve only while it is
// configured (dropped from the list, they stay stored and List shows them
// with their key as the code). Every method
// that takes a code (Resolve, Delete, Stats, Update, History, Clicks,
// Breakdown, Uniques, QRCode, ShortURL) takes Key(domain, code) for a link
// off the default domain; Link.Code is always the code as visitors type
// it, and LinkURL gives a link's short URL on its domain (BaseURL's
// scheme, port and path). RedirectHandler resolves by the request's Host,
// case folded, port and trailing dot dropped: with Domains set, a Host
// that is neither BaseURL's nor one of them is 404 for every code — never
// the default domain's link; without Domains any Host is the default, as
// before. APIHandler addresses a link off the default domain with
// ?domain= on its code routes (and "domain" in a create body); an unknown
// domain is 400 on create and 404 on the code routes. The domains are
// refused as link targets, as OwnHosts are.
//
// Analytics (on by default; Config.NoAnalytics turns them off). Each
// counted click is recorded in memory — a few map updates under the lock
// of one of 16 stripes (by code), no Redis or SQL call on the redirect
// path — under its link, its UTC hour and six dimensions: referrer (the Referer's host, canonical as link
// hosts are: Example.COM. and example.com:443 are example.com; "(direct)"
// without one, "(invalid)" for no well-formed host), device (Device: a
// documented substring classifier of the User-Agent into desktop, mobile,
// tablet, bot or other), country (Config.Country, by default the
// CF-IPCountry or X-Country header; two letters, upper-cased, else
// "(unknown)"), and utm_source, utm_medium and utm_campaign of the
// destination URL at the time of the click ("(none)"). Bots — device bot
// — are counted apart: every query returns people's clicks and bots'
// beside them (Point.Bots, Count.Bots), as Shlink's excludeBots does.
// Resolve without ResolveOptions.Request records a click as direct, device
// other, country unknown. Bounds: a value is at most MaxValueLen (64)
// bytes (a UTM value is cut, a longer host is "(invalid)"), a Referer is
// read only up to its path, and a dimension keeps at most
// Config.AnalyticsValues (100) distinct values per link and hour between
// two flushes — the clicks of the others count under "(other)"
// (AnalyticsStats.Overflowed) — so a flood of forged Referers grows
// neither memory nor a flush beyond that. Header classifications are
// memoised in fixed tables of 4,096 entries.
//
// Every FlushEvery the rollup is cut into a batch with a random id (made
// time first) and written as per link × hour and per link × UTC day rows
// per (dimension, value), people and bots apart, in a rollup table beside
// each link table (links_007_clicks next to links_007). Each link table's
// part of a batch is one SQL transaction that first inserts the batch id
// into that table's applied-batches table (links_007_batches), then adds
// the counts (INSERT … ON DUPLICATE KEY UPDATE n = n + VALUES(n) on
// MySQL/MariaDB, ON CONFLICT … DO UPDATE on SQLite). A part that fails is
// kept and written again at the next flush as the very same batch (same
// id, same counts) — while it fails, new clicks wait in memory for the next
// batch — and a part that had committed with its reply lost meets its own
// id, is rolled back and counts as written: each click is stored exactly
// once (TestAnalyticsExactness: 100,800 redirects through two Services,
// with commits whose replies are lost, equal the test's model in every
// row). Applied batch ids are kept 7 days (pruned hourly by each process,
// in a flush's transaction); a batch still failing after 24 hours is given
// up, its counts lost and reported (OnError, AnalyticsStats.Dropped),
// since a retry could then no longer be told from a first write. Unique
// visitors per link and UTC day are a Redis HyperLogLog (Uniques, 0.81%
// standard error), fed in the same flush by PFADD of a SHA-256 of the
// code, the day, the client IP and the User-Agent (never the address
// itself; bots excluded; at most 10,000 new visitors per link and day
// between flushes), in the link's hash slot; PFADD adds a member once, so
// a retried flush cannot inflate it. Each key expires Config.UniquesTTL
// (400 days) after its day.
//
// Crash bound: a process that dies (SIGKILL) loses the clicks recorded
// since its last cut — at most one FlushEvery — plus a batch kept from a
// failed flush; what it acknowledged stays, and a part is all or nothing,
// so a link's dimensions always add up to its total (TestAnalyticsCrash).
// Shutdown writes the kept batch and then the rest. Queries read SQL, so a
// click shows up within FlushEvery. Deleting a link deletes its rollups
// and its clicks not yet cut into a batch (a batch being written as it is
// deleted may still add a few rows); its HyperLogLogs expire.
//
// Costs (go test -c -o /tmp/sl.test ./shortlink/, then /tmp/sl.test
// -test.run '^$' -test.bench AnalyticsFlush -test.benchtime 20x with
// CASEBOOK_REDIS_ADDR naming a private redis-server and
// CASEBOOK_MYSQL_DSN a local MariaDB, and without the DSN for SQLite;
// three rounds on the otherwise idle 2 cores, 2026-12-04). Flushing 1,000
// redirects spread over 10 links took 12.9–16.1 ms on MariaDB and 5.1–5.9
// ms on SQLite (6 transactions, 580 rows) and 0.33–0.41 ms of Redis CPU
// (10 PFADD+EXPIREAT in one pipeline; redis-µs/flush, INFO cpu around the
// flush); over 1,000 links 123–138 ms and 56–58 ms (16 transactions,
// 10,000 rows — per click 2 totals and 8 dimension rows, hourly and daily;
// a UTM dimension's "(none)" is not stored but derived from the total when
// read —) and 1.96–2.31 ms of Redis CPU (727 keys). On a loaded machine
// (load 3–5, 2026-12-03) the same flushes took 25.5 and 257 ms on MariaDB,
// 6.7 and 135 ms on SQLite. A process's flusher therefore keeps up with
// some 7,000 clicks a second on distinct links on MariaDB, many more when
// links repeat. The rollup
// held 1.5 KB per active link (10 clicks in an hour with 9 referrers, 11
// User-Agents, 7 countries and 10 visitors). Recording a click took
// 0.55–0.74 µs (BenchmarkAnalyticsRecord, -test.benchtime 1s -test.cpu
// 1,2). A redirect through the handler in-process, with a Referer,
// User-Agent, country and client IP, took 1.9–3.1 µs with analytics and
// 1.3–2.1 µs without (BenchmarkRedirectAnalytics, each impl in its own
// process, 4 runs interleaved: for i in 1 2 3 4; do for m in on off; do
// /tmp/sl.test -test.run '^$' -test.bench
// "RedirectAnalytics/impl=analytics-$m\$" -test.benchtime 400ms
// -test.benchmem; done; done): 1.25–1.66× in pairs, the same 6
// allocations, +30–45 B — an added 0.5–1 µs. Served over HTTP to a load
// generator in another process (BenchmarkRedirectHTTP; go test -c -o
// /tmp/sl.test ./shortlink/, then each impl in its own process, six rounds
// interleaved: /tmp/sl.test -test.run '^$' -test.bench
// "RedirectHTTP/impl=$m\$" -test.benchtime 20000x, local Redis and
// MariaDB, the 2 cores otherwise idle but for a read-only reviewer): the
// default, analytics on and flushed hourly so that the redirect path alone
// is measured, served 18.4–21.1k redirects/s against 18.2–23.5k for a bare
// net/http handler writing the same 302 — 0.79–1.16× in the same round,
// 0.99× the median, 5 rounds of 6 at or above 0.85× — which is why they
// are on by default. Flushed every second (impl=casebook-flush-1s, the
// default FlushEvery) it served 11.7–16.4k/s, 0.59–0.86× bare: here the
// flushes' SQL runs on the two cores the server uses (each second's
// flush upserts rollup rows and a click count for every one of the 1,024
// links the load visits); with the database on its own
// machine the server pays only the batch's building and sending. Again on
// 2026-12-04 (the same loop, -test.benchtime 200000x, a private
// redis-server, the machine otherwise idle): the default 25.8–32.5k/s
// against 30.2–36.1k bare, 0.80–1.03× in the same round, 0.89× the median,
// 4 rounds of 6 at or above 0.85×; flushed every second 17.9–21.5k/s,
// 0.57–0.71×. The spread between rounds is, we guess, the load generator
// sharing the 2 cores with the server; read the median.
//
// Visit limits (MaxVisits) are exact under concurrency: an atomic counter in
// Redis per limited link, counted once per request even when go-redis
// re-sends the script after a lost reply (a request id the script
// remembers for a minute). If Redis loses that counter it is re-seeded from
// the flushed click count, so visits counted but not yet flushed can be
// granted again — the price of not locking a row per redirect.
//
// Validation: only http and https targets, at most 2048 bytes, a well-formed
// host, no credentials, not this service's own hosts (no loops), not a
// blocklisted domain or its subdomains. Hosts are parsed as browsers parse
// them (WHATWG URL host parsing: case, trailing dot, IPv4 in 1 to 4 decimal,
// octal or hex parts, IPv6 and IPv4-mapped IPv6 through net/netip) and
// compared in canonical form, so 127.1, 2130706433, 0x7f000001, 0177.0.0.1
// and [::ffff:127.0.0.1] are all 127.0.0.1; when an own host is loopback,
// every loopback or unspecified address and localhost are own too. Hosts
// are stricter than browsers' where that costs nothing: letters, digits and
// hyphens only, and internationalised names in punycode (non-ASCII hosts are
// refused rather than mapped as UTS #46 would). URLs are stored normalised:
// lower-case scheme, canonical host, no default port. Aliases
// are 3..64 of A-Z a-z 0-9 - _ and not reserved. Creations are rate-limited
// per client IP (10/s) and so are misses (60/min), through go-redis/redis_rate
// (GCRA in Redis). So that codes cannot be walked, a client out of misses is
// refused everything — existing codes too — before any lookup: ResolveWith
// with a ClientIP (and the handler, for redirects, stats and deletes) peeks
// at the budget first, one limiter call, and spends one unit on a miss. The
// limiter fails open (OnError hears of it): a Redis outage must not stop
// cached links from resolving.
//
// A peek on every lookup would be a Redis round trip on every redirect,
// cached or not, so by default a Service peeks only for clients that missed
// through it within their budget's refill time (the local miss filter):
// nearly every visitor never misses, and a cached redirect then makes no
// Redis call. The trade-off, against walking: a client that spent its
// budget through other processes gets one more lookup on each process
// before that one refuses it too, so with N app servers a walker learns at
// most N more codes' fate per refill time (TestLocalMissFilterAcrossProcesses).
// Config.SharedMissCheck makes every lookup peek (exact across processes).
// Out of process (BenchmarkRedirectHTTP, a vegeta load generator, 2 shared
// cores) the shared check served 3.5–4.1k redirects/s against 13–16k/s for
// a bare net/http handler writing the same 302, and the filter
// 12.1–13.1k/s in the same run (about 0.95× bare); with the filter the
// default, on 2026-12-03 (go test -run '^$' -bench RedirectHTTP -benchtime
// 20000x -count 2 ./shortlink/, local Redis and MariaDB, the machine
// shared): default 10.2–10.5k/s, shared check 2.7–3.7k/s, bare 11.2–11.3k/s
// (0.91–0.94× bare).
//
// Databases: MySQL 8 / MariaDB 10.6+ ("mysql" driver) or SQLite ("sqlite",
// modernc.org/sqlite; its pool is set to one connection, SQLite having one
// writer). The package links neither driver: the service imports the one
// it uses.
//
// Observability: the Service emits OpenTelemetry metrics and spans to
// Config.MeterProvider and TracerProvider, by default the global ones (a
// service that set OpenTelemetry up gets them with no casebook code; one
// that did not pays no allocation and no clock read, but a check per
// operation — see the cost below).
//
//	casebook.shortlink.operation.duration  histogram (s)        casebook.operation, casebook.outcome, casebook.reason
//	casebook.shortlink.operations          counter              the same
//	casebook.shortlink.cache.lookups       counter (lookups)    casebook.cache.layer, casebook.cache.result
//
// Operations are shorten (Shorten, POST /api/links), shorten_many
// (ShortenMany, POST /api/links/bulk), list (List, GET /api/links), resolve (Resolve,
// ResolveWith), redirect (GET and HEAD /{code}), stats (Stats, GET
// /api/links/{code}), update (Update, PATCH /api/links/{code}), history
// (History, GET /api/links/{code}/history), clicks (Clicks, GET
// /api/links/{code}/stats), breakdown (Breakdown, the stats route with
// dim), uniques (Uniques), delete (Delete, DELETE
// /api/links/{code}) and qr (QRCode, GET /{code}/qr); a
// request to the handlers counts once, as its route's operation (a redirect
// is not also a resolve), with what it refused before the Service's method
// included. Outcomes are ok, refused, canceled and error; a refusal's
// reason is invalid (URL, alias, options or request body), blocked (a
// blocklisted domain), alias_taken, conflict (an Update's IfVersion is not
// the link's version), rate_limited (the create or the miss
// limit), not_found, expired, max_visits (the visit limit used up) or
// closed (after Close). Anything else — Redis or SQL failing, five
// generated codes in a row taken — is an error. No attribute holds a code,
// a URL or a client address. Each operation is a span
// "shortlink.<operation>" with its outcome and reason as attributes and,
// for an error, the error recorded.
//
// A lookup counts the answer of each layer it asked: casebook.cache.layer
// local (this process's cache), redis or sql; casebook.cache.result hit,
// negative (a remembered miss), miss (not there, so the next layer is
// asked; for sql, no such link) or error (the layer failed, and the lookup
// with it). Concurrent misses of one code sharing one Redis read and one
// SQL query count them once. The counter is read at collection from the
// counts CacheStats reports, so a lookup pays nothing for it; a Service
// stops reporting it at Close.
//
// Cost, from BenchmarkObservability, which runs the same resolve without
// its span and counters (impl=uninstrumented, the baseline) beside it in
// one run (go test -c, then ./shortlink.test -test.run '^$' -test.bench
// Observability -test.benchtime 400ms -test.cpu 1 -test.benchmem, 3 runs;
// local Redis and MariaDB, 2 cores shared with another test run, load 3,
// so the ranges are wide): a Resolve answered by the local cache took
// 142–182 ns uninstrumented and 145–170 ns with no provider installed —
// the same within the noise, no allocation (the instrumentation reads one
// flag, inlined: 1.6 ns in internal/obs's BenchmarkOpUninstalled) —;
// 641–743 ns with the SDK's metrics, 1.4–2.2 µs with its tracer sampling
// every span (7 allocations, 1 KB) and 2.2–3.1 µs with both. A redirect
// served in-process by the handler with the local miss filter took 0.71–1.23 µs
// with no provider (5 allocations), 1.36–1.66 µs with metrics, 2.2–2.4 µs
// with traces and 2.8–3.0 µs with both. The SDK's cost is its own: its
// bare record plus add alone costs about as much as casebook's whole
// metrics path (internal/obs's BenchmarkSDKFloor, impl=sdk-floor beside
// impl=casebook in one run), several times a cached Resolve, so no
// instrumentation of an operation this short stays within 10% of it with
// the SDK installed. Sample spans (for example
// sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))) on the redirect
// path.
//
// A Service is safe for concurrent use. Close stops every goroutine it
// started (click and analytics flushers, code segment prefetch, local
// cache) and may be
// called more than once.
//
// Design notes, diagram and measured costs: docs/shortlink.md in the repository.
package shortlink
