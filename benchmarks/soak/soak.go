package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
	feedblock "github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/faultproxy"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/rank"
	"github.com/casebook-dev/casebook/seckill"
	"github.com/casebook-dev/casebook/shortlink"
	"github.com/casebook-dev/casebook/signin"
)

// The soak (-duration D) drives several blocks at a steady rate for D
// through fault proxies in front of Redis and the SQL server, arming a
// random fault every few seconds (latency, connection resets, a black hole,
// lost replies, a lost COMMIT reply), then heals the network, lets the
// asynchronous parts settle and checks each block's invariants against what
// its callers were told. Every few seconds it samples goroutines and the
// live heap, so a leak shows as growth. It exits 1 when an invariant fails.
//
// Each operation's outcome is recorded as its caller saw it: acknowledged,
// refused (a clear answer that changed nothing) or unknown (an error: the
// write may or may not have happened). An invariant holds for every
// acknowledged write exactly and bounds the unknown ones.

// soakBlock is one block under soak.
type soakBlock struct {
	name  string
	op    func(ctx context.Context, i int64) outcome
	check func(ctx context.Context) []string // violated invariants, after settle
	// settle, when set, finishes the block's asynchronous work once the
	// network is healed (relays, releases).
	settle func(ctx context.Context) error
	close  func()

	acked, refused, unknown, shed atomic.Int64
}

type outcome int

const (
	acked outcome = iota
	refused
	unknown
)

func (b *soakBlock) count(o outcome) {
	switch o {
	case acked:
		b.acked.Add(1)
	case refused:
		b.refused.Add(1)
	default:
		b.unknown.Add(1)
	}
}

// soakFaults are the faults armed at random, each for a moment.
type soakFault struct {
	name string
	arm  func()
	hold time.Duration
}

// runSoak soaks for d at rate operations a second per block, on the Redis at
// redisAddr and the MySQL of mysqlDSN (embedded stand-ins when empty).
func runSoak(ctx context.Context, redisAddr, mysqlDSN string, d time.Duration, rate int, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := devstack.OpenRedis(ctx, redisAddr)
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	defer r.Close()
	sqlb, err := devstack.OpenSQL(ctx, mysqlDSN, "casebook_bench")
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	defer sqlb.Close()
	mysql.SetLogger(log.New(io.Discard, "", 0)) // the driver logs every cut connection
	rp, err := faultproxy.Start(r.Addrs[0])
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	defer rp.Close()
	rdb := redis.NewClient(&redis.Options{Addr: rp.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer rdb.Close()

	faults := []soakFault{
		{"redis latency 50ms", func() { rp.Latency(50*time.Millisecond, 20*time.Millisecond) }, time.Second},
		{"redis resets", rp.Reset, 200 * time.Millisecond},
		{"redis black hole", rp.BlackHole, 500 * time.Millisecond},
		{"redis lost replies (1–4)", func() { rp.DropReplies(1 + rand.IntN(4)) }, time.Second},
	}
	db, sqlProxy, err := soakSQL(mysqlDSN, sqlb)
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	if sqlProxy != nil {
		defer sqlProxy.Close()
		defer db.Close()
		faults = append(faults,
			soakFault{"sql latency 50ms", func() { sqlProxy.Latency(50*time.Millisecond, 20*time.Millisecond) }, time.Second},
			soakFault{"sql resets", sqlProxy.Reset, 200 * time.Millisecond},
			soakFault{"sql lost COMMIT reply", func() { sqlProxy.DropReplyTo("COMMIT", 1) }, time.Second},
		)
	} else {
		fmt.Fprintln(stderr, "soak: SQLite has no connection to cut: faults on Redis only (give -mysql for SQL faults)")
	}

	ns := "casebook:soak:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.Background(), r.Client, ns+"*")
	var blocks []*soakBlock
	for _, mk := range []func(context.Context, redis.UniversalClient, *sqlx.DB, string) (*soakBlock, error){
		soakRank, soakSignin, soakShortlink, soakSeckill, soakFeed, soakHotlist,
	} {
		b, err := mk(ctx, rdb, db, ns)
		if err != nil {
			fmt.Fprintln(stderr, "soak: set-up:", err)
			return 1
		}
		if b.close != nil {
			defer b.close()
		}
		blocks = append(blocks, b)
	}
	fmt.Fprintf(stderr, "soak: %v, %d blocks at %d ops/s each, faults every 2–5 s on %s\n", d, len(blocks), rate, describeRedis(r))

	var samples []soakSample
	samples = append(samples, sample(0))
	injected := map[string]int{}
	var wg sync.WaitGroup
	runCtx, stopRun := context.WithTimeout(ctx, d)
	defer stopRun()
	for _, b := range blocks {
		wg.Go(func() { drive(runCtx, b, rate) })
	}
	start := time.Now()
	next := time.After(time.Duration(2+rand.IntN(3)) * time.Second)
	tick := time.NewTicker(max(d/20, 5*time.Second))
	defer tick.Stop()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tick.C:
			s := sample(time.Since(start))
			samples = append(samples, s)
			fmt.Fprintf(stderr, "soak: %v goroutines %d, live heap %.1f MiB\n", s.at.Round(time.Second), s.goroutines, s.heapMiB)
		case <-next:
			f := faults[rand.IntN(len(faults))]
			injected[f.name]++
			f.arm()
			select {
			case <-time.After(f.hold):
			case <-runCtx.Done():
			}
			rp.Heal()
			if sqlProxy != nil {
				sqlProxy.Heal()
			}
			next = time.After(time.Duration(2000+rand.IntN(3000)) * time.Millisecond)
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "soak: interrupted")
		return 1
	}
	rp.Heal()
	if sqlProxy != nil {
		sqlProxy.Heal()
	}

	failed, checking := false, time.Now()
	violations := map[string][]string{}
	for _, b := range blocks {
		if b.settle != nil {
			settleCtx, stopSettle := context.WithTimeout(ctx, 3*time.Minute)
			err := b.settle(settleCtx)
			stopSettle()
			if err != nil {
				violations[b.name] = append(violations[b.name], "settle: "+err.Error())
			}
		}
		// Each block's check has its own time: it reads back everything its
		// callers were told, which a long soak makes a lot.
		checkCtx, stopCheck := context.WithTimeout(ctx, 10*time.Minute)
		violations[b.name] = append(violations[b.name], b.check(checkCtx)...)
		if err := checkCtx.Err(); err != nil {
			violations[b.name] = append(violations[b.name], "check cut short: "+err.Error())
		}
		stopCheck()
		failed = failed || len(violations[b.name]) > 0
	}
	end := sample(time.Since(start))
	samples = append(samples, end)

	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "soak of %v at %d ops/s per block, on %s and %s\n\n", d, rate, describeRedis(r), sqlb.Kind)
	fmt.Fprintln(w, "fault\tinjected")
	for _, f := range faults {
		fmt.Fprintf(w, "%s\t%d\n", f.name, injected[f.name])
	}
	fmt.Fprintf(w, "redis replies lost\t%d\n", rp.Cuts())
	if sqlProxy != nil {
		fmt.Fprintf(w, "sql replies lost\t%d\n", sqlProxy.Cuts())
	}
	fmt.Fprintln(w, "\nblock\tacknowledged\trefused\tunknown (errors)\tshed (late ticks)\tinvariants")
	for _, b := range blocks {
		verdict := "hold"
		if len(violations[b.name]) > 0 {
			verdict = fmt.Sprintf("%d VIOLATED", len(violations[b.name]))
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\n", b.name, b.acked.Load(), b.refused.Load(), b.unknown.Load(), b.shed.Load(), verdict)
	}
	w.Flush()
	for _, b := range blocks {
		for i, v := range violations[b.name] {
			if i == 10 {
				fmt.Fprintf(stdout, "  %s: … and %d more\n", b.name, len(violations[b.name])-10)
				break
			}
			fmt.Fprintf(stdout, "  %s: %s\n", b.name, v)
		}
	}
	first, peakG, peakH := samples[min(1, len(samples)-1)], 0, 0.0
	for _, s := range samples {
		peakG, peakH = max(peakG, s.goroutines), max(peakH, s.heapMiB)
	}
	fmt.Fprintf(stdout, "\nsettling and checking took %v\n", time.Since(checking).Round(time.Second))
	fmt.Fprintf(stdout, "goroutines: %d before, %d at the first sample under load, %d at the end (peak %d)\n", samples[0].goroutines, first.goroutines, end.goroutines, peakG)
	fmt.Fprintf(stdout, "live heap: %.1f MiB before, %.1f MiB at the first sample under load, %.1f MiB at the end (peak %.1f MiB)\n", samples[0].heapMiB, first.heapMiB, end.heapMiB, peakH)
	if failed {
		fmt.Fprintln(stderr, "soak: invariants violated")
		return 1
	}
	return 0
}

// soakSQL opens the scratch database through a fault proxy on MySQL; SQLite
// is used as it is (nil proxy).
func soakSQL(dsn string, sqlb *devstack.SQL) (*sqlx.DB, *faultproxy.Proxy, error) {
	if dsn == "" {
		return sqlb.DB, nil, nil
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	p, err := faultproxy.Start(cfg.Addr)
	if err != nil {
		return nil, nil, err
	}
	cfg.Addr, cfg.DBName, cfg.ParseTime = p.Addr, sqlb.Name, true
	db, err := sqlx.Open("mysql", cfg.FormatDSN())
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	return db, p, nil
}

type soakSample struct {
	at         time.Duration
	goroutines int
	heapMiB    float64
}

func sample(at time.Duration) soakSample {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return soakSample{at: at, goroutines: runtime.NumGoroutine(), heapMiB: float64(m.HeapAlloc) / (1 << 20)}
}

// drive calls b.op rate times a second until ctx ends, from up to 64
// goroutines; a tick that finds all of them busy (every call stuck in a
// fault) is shed and counted.
func drive(ctx context.Context, b *soakBlock, rate int) {
	ticks := make(chan int64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range ticks {
				opCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				b.count(b.op(opCtx, i))
				cancel()
			}
		})
	}
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer func() {
		t.Stop()
		close(ticks)
		wg.Wait()
	}()
	for i := int64(0); ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			select {
			case ticks <- i:
			default:
				b.shed.Add(1)
			}
		}
	}
}

// soakRank: +1 to one of 200 members. Add is retry-safe (a request id per
// script call), so each member's score lies between its acknowledged adds
// and those plus the unknown ones.
func soakRank(ctx context.Context, rdb redis.UniversalClient, _ *sqlx.DB, ns string) (*soakBlock, error) {
	board, err := rank.New(rdb, rank.Config{Name: "soak", Namespace: ns + ":rank", Shards: 4, Epoch: time.Now().Add(-time.Minute)})
	if err != nil {
		return nil, err
	}
	const members = 200
	var ack, unk [members]atomic.Int64
	return &soakBlock{
		name: "rank (Add, 4 shards)",
		op: func(ctx context.Context, i int64) outcome {
			m := i % members
			if _, err := board.Add(ctx, "m"+strconv.FormatInt(m, 10), 1); err != nil {
				unk[m].Add(1)
				return unknown
			}
			ack[m].Add(1)
			return acked
		},
		check: func(ctx context.Context) []string {
			var bad []string
			for m := range members {
				e, err := board.Score(ctx, "m"+strconv.Itoa(m))
				if errors.Is(err, rank.ErrNotFound) {
					e.Score, err = 0, nil
				}
				if err != nil {
					return append(bad, "read: "+err.Error())
				}
				if lo, hi := ack[m].Load(), ack[m].Load()+unk[m].Load(); e.Score < lo || e.Score > hi {
					bad = append(bad, fmt.Sprintf("m%d scores %d; acknowledged adds %d, unknown %d", m, e.Score, lo, hi-lo))
				}
			}
			return bad
		},
	}, nil
}

// soakSignin: 500 users sign days of 2026 at random. A day acknowledged is
// signed; each user's month count lies between the days acknowledged and
// those plus the unknown ones.
func soakSignin(ctx context.Context, rdb redis.UniversalClient, _ *sqlx.DB, ns string) (*soakBlock, error) {
	s, err := signin.New(rdb, signin.Config{Namespace: ns + ":signin", Buckets: 8})
	if err != nil {
		return nil, err
	}
	const users = 500
	type days struct {
		mu           sync.Mutex
		ack, unknown map[int]bool // day of March 2026
	}
	var all [users]days
	for u := range all {
		all[u].ack, all[u].unknown = map[int]bool{}, map[int]bool{}
	}
	return &soakBlock{
		name: "signin (Sign)",
		op: func(ctx context.Context, i int64) outcome {
			u, day := int(i%users), 1+rand.IntN(31)
			_, err := s.Sign(ctx, "u"+strconv.Itoa(u), time.Date(2026, 3, day, 12, 0, 0, 0, time.UTC))
			d := &all[u]
			d.mu.Lock()
			defer d.mu.Unlock()
			if err != nil {
				d.unknown[day] = true
				return unknown
			}
			d.ack[day] = true
			return acked
		},
		check: func(ctx context.Context) []string {
			var bad []string
			for u := range all {
				d := &all[u]
				user := "u" + strconv.Itoa(u)
				n, err := s.MonthCount(ctx, user, 2026, time.March)
				if err != nil {
					return append(bad, "read: "+err.Error())
				}
				either := len(d.ack)
				for day := range d.unknown {
					if !d.ack[day] {
						either++
					}
				}
				if n < len(d.ack) || n > either {
					bad = append(bad, fmt.Sprintf("%s has %d days in March; acknowledged %d, at most %d", user, n, len(d.ack), either))
				}
				days, err := s.History(ctx, user, signin.Date{Year: 2026, Month: time.March, Day: 1}, signin.Date{Year: 2026, Month: time.March, Day: 31})
				if err != nil {
					return append(bad, "read: "+err.Error())
				}
				signed := map[int]bool{}
				for _, dt := range days {
					signed[dt.Day] = true
				}
				if len(days) != n {
					bad = append(bad, fmt.Sprintf("%s: History lists %d days, MonthCount says %d", user, len(days), n))
				}
				for day := range d.ack {
					if !signed[day] {
						bad = append(bad, fmt.Sprintf("%s: acknowledged 2026-03-%02d is not signed", user, day))
					}
				}
			}
			return bad
		},
	}, nil
}

// soakShortlink: shorten a new URL, resolve a link made earlier. Every code
// acknowledged resolves to its own URL, during the soak and after.
func soakShortlink(ctx context.Context, rdb redis.UniversalClient, db *sqlx.DB, ns string) (*soakBlock, error) {
	svc, err := shortlink.NewService(rdb, []*sqlx.DB{db}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: ns + ":link", SegmentStep: 100})
	if err != nil {
		return nil, err
	}
	if err := svc.Migrate(ctx); err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		links = map[string]string{} // code → URL
		codes []string
		wrong []string
	)
	return &soakBlock{
		name:  "shortlink (Shorten, Resolve)",
		close: func() { svc.Close() },
		op: func(ctx context.Context, i int64) outcome {
			if i%2 == 1 {
				mu.Lock()
				if len(codes) == 0 {
					mu.Unlock()
					return refused
				}
				code := codes[rand.IntN(len(codes))]
				want := links[code]
				mu.Unlock()
				l, err := svc.Resolve(ctx, code)
				if err != nil {
					return unknown
				}
				if l.URL != want {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s resolved to %s, made for %s", code, l.URL, want))
					mu.Unlock()
				}
				return acked
			}
			url := "https://example.com/soak/" + strconv.FormatInt(i, 10)
			l, err := svc.Shorten(ctx, url, shortlink.Options{})
			if err != nil {
				return unknown
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := links[l.Code]; ok {
				wrong = append(wrong, fmt.Sprintf("code %s issued twice: %s and %s", l.Code, prev, url))
			}
			links[l.Code] = url
			codes = append(codes, l.Code)
			return acked
		},
		check: func(ctx context.Context) []string {
			mu.Lock()
			defer mu.Unlock()
			bad := append([]string(nil), wrong...)
			var badMu sync.Mutex
			each(ctx, codes, func(ctx context.Context, code string) {
				l, err := svc.Resolve(ctx, code)
				if err != nil || l.URL != links[code] {
					badMu.Lock()
					bad = append(bad, fmt.Sprintf("%s made for %s resolves to %v (%v)", code, links[code], l, err))
					badMu.Unlock()
				}
			})
			return bad
		},
	}, nil
}

// soakSeckill: a campaign of 500 units over 4 buckets, 2,000 users buying one
// each (limit 1), unpaid reservations released after 15 s (operations give up after 5 s, within the 10 s retry window), orders relayed
// straight into the order block. Every purchase acknowledged has its order
// in SQL once the relay drained; once every reservation is released, Redis
// and SQL both hold all 500 units again and Reconcile finds no difference.
func soakSeckill(ctx context.Context, rdb redis.UniversalClient, db *sqlx.DB, ns string) (*soakBlock, error) {
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	if err != nil {
		return nil, err
	}
	orders, err := order.New(rdb, []*sqlx.DB{db}, order.Config{Namespace: ns + ":order"})
	if err != nil {
		ids.Close()
		return nil, err
	}
	closeAll := func() { orders.Close(); ids.Close() }
	const stock, buyers, pay = 500, 2000, 15 * time.Second
	s, err := seckill.New(rdb, db, orders, seckill.Config{Namespace: ns + ":sale", IDs: ids, PayTimeout: pay, RetryWindow: 10 * time.Second})
	if err == nil {
		err = orders.Migrate(ctx)
	}
	if err == nil {
		err = s.Migrate(ctx)
	}
	var sale *seckill.Sale
	if err == nil {
		sale, err = s.Create(ctx, seckill.Campaign{ID: "soak-" + ns[len(ns)-6:], SKU: "soak-" + ns[len(ns)-6:], Price: 100, Stock: stock, Limit: 1, Buckets: 4,
			Starts: time.Now().Add(-time.Minute), Ends: time.Now().Add(24 * time.Hour)})
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	relay := outbox.NewRelay(rdb, sale.Outboxes(), "orders", outbox.Direct(s.HandleOrder))
	bt := sale.NewBatcher(seckill.BatchConfig{})
	// Errors under faults: the next tick retries. order's Sweep settles
	// the stock of an order whose close was cut half-way (a deployment runs
	// it every minute or so); until then its reservation waits.
	stopRelay := every(50*time.Millisecond, func(ctx context.Context) { relay.DrainAll(ctx) })
	stopRelease := every(200*time.Millisecond, func(ctx context.Context) {
		sale.ReleaseDue(ctx)
		orders.Sweep(ctx, 100)
	})
	stop := sync.OnceFunc(func() { stopRelay(); stopRelease(); bt.Close() })
	type won struct{ user, id string }
	var (
		mu   sync.Mutex
		wins []won
	)
	return &soakBlock{
		name:  "seckill (Buy via Batcher, release, orders)",
		close: func() { stop(); closeAll() },
		op: func(ctx context.Context, i int64) outcome {
			user := "u" + strconv.Itoa(rand.IntN(buyers))
			id, err := bt.Buy(ctx, user, 1)
			switch {
			case errors.Is(err, seckill.ErrSoldOut), errors.Is(err, seckill.ErrLimitReached), errors.Is(err, seckill.ErrRateLimited):
				return refused
			case err != nil:
				return unknown
			}
			mu.Lock()
			wins = append(wins, won{user, id})
			mu.Unlock()
			return acked
		},
		settle: func(ctx context.Context) error {
			stop() // no more buys: drain the relay, then release every reservation
			if _, err := relay.DrainAll(ctx); err != nil {
				return fmt.Errorf("relay: %w", err)
			}
			deadline := time.Now().Add(pay + 30*time.Second)
			for {
				_, relErr := sale.ReleaseDue(ctx)
				if _, err := orders.Sweep(ctx, 100); err != nil {
					relErr = errors.Join(relErr, err)
				}
				rep, err := sale.Reconcile(ctx, false)
				if err == nil && rep.OK() && rep.InFlight == 0 && rep.SQLStock == stock && rep.RedisStock == stock {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("after every deadline passed: %+v (reconcile: %v; last release: %v)", rep, err, relErr)
				}
				time.Sleep(200 * time.Millisecond)
			}
		},
		check: func(ctx context.Context) []string {
			mu.Lock()
			defer mu.Unlock()
			var bad []string
			for _, w := range wins {
				o, err := s.OrderOf(ctx, w.user, w.id)
				if err != nil {
					bad = append(bad, fmt.Sprintf("acknowledged purchase %s of %s has no order: %v", w.id, w.user, err))
				} else if o.Status != order.Closed {
					bad = append(bad, fmt.Sprintf("unpaid order of purchase %s is %s after its deadline, want closed", w.id, o.Status))
				}
			}
			return bad
		},
	}, nil
}

// soakFeed: 40 authors publish (a quarter of the ticks; the rest read a
// timeline), 60 readers follow 3 authors each, fan-out relayed straight into
// the inboxes. No timeline page ever holds a post twice; once the relay
// drained, each reader's whole timeline holds no post twice, only posts of
// the authors it follows, and every acknowledged one among the newest 1,500
// (below the inbox cap) of those authors.
func soakFeed(ctx context.Context, rdb redis.UniversalClient, db *sqlx.DB, ns string) (*soakBlock, error) {
	svc, err := feedblock.New(rdb, []*sqlx.DB{db}, feedblock.Config{Namespace: ns + ":feed", TablesPerDB: 4})
	if err != nil {
		return nil, err
	}
	const authors, readers, follows = 40, 60, 3
	followed := map[string][]string{}
	var pairs [][2]string
	for r := range readers {
		reader := "r" + strconv.Itoa(r)
		for k := range follows {
			author := "a" + strconv.Itoa((r*7+k*13)%authors)
			pairs = append(pairs, [2]string{reader, author})
			followed[reader] = append(followed[reader], author)
		}
	}
	if err = svc.Migrate(ctx); err == nil {
		err = svc.SeedFollows(ctx, pairs)
	}
	if err != nil {
		svc.Close()
		return nil, err
	}
	relay := func(ctx context.Context) (int, error) {
		return svc.RelayFanout(ctx, outbox.Direct(svc.HandleChunk), "feed", 100)
	}
	// Errors under faults: the next tick retries.
	stop := every(50*time.Millisecond, func(ctx context.Context) { relay(ctx) })
	var (
		mu         sync.Mutex
		posts      = map[string][]feedblock.Post{} // author → acknowledged posts
		unanswered = map[string]int{}              // author → publishes with no answer
		wrong      []string
	)
	timeline := func(ctx context.Context, reader string, pages int) ([]feedblock.Post, error) {
		var all []feedblock.Post
		cursor := ""
		for range pages {
			p, err := svc.Timeline(ctx, reader, cursor, 100)
			if err != nil {
				return nil, err
			}
			all = append(all, p.Posts...)
			if cursor = p.Next; cursor == "" {
				break
			}
		}
		return all, nil
	}
	dupes := func(ps []feedblock.Post) []int64 {
		seen, twice := map[int64]bool{}, []int64(nil)
		for _, p := range ps {
			if seen[p.ID] {
				twice = append(twice, p.ID)
			}
			seen[p.ID] = true
		}
		return twice
	}
	return &soakBlock{
		name:  "feed (Publish, Timeline, fan-out)",
		close: func() { stop(); svc.Close() },
		op: func(ctx context.Context, i int64) outcome {
			if i%4 != 0 {
				reader := "r" + strconv.Itoa(rand.IntN(readers))
				ps, err := timeline(ctx, reader, 1)
				if err != nil {
					return unknown
				}
				if d := dupes(ps); len(d) > 0 {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("a page of %s's timeline holds posts %v twice", reader, d))
					mu.Unlock()
				}
				return acked
			}
			author := "a" + strconv.Itoa(rand.IntN(authors))
			p, err := svc.Publish(ctx, feedblock.PublishRequest{Author: author, RequestID: "p" + strconv.FormatInt(i, 10), Body: "soak " + strconv.FormatInt(i, 10)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				unanswered[author]++
				return unknown
			}
			posts[author] = append(posts[author], p)
			return acked
		},
		settle: func(ctx context.Context) error {
			stop()
			for quiet := 0; quiet < 2; {
				n, err := relay(ctx)
				if err != nil {
					return fmt.Errorf("relay: %w", err)
				}
				if n == 0 {
					quiet++
				}
			}
			return nil
		},
		check: func(ctx context.Context) []string {
			mu.Lock()
			defer mu.Unlock()
			bad := append([]string(nil), wrong...)
			for r := range readers {
				reader := "r" + strconv.Itoa(r)
				got, err := timeline(ctx, reader, 1000)
				if err != nil {
					return append(bad, fmt.Sprintf("%s's timeline: %v", reader, err))
				}
				if d := dupes(got); len(d) > 0 {
					bad = append(bad, fmt.Sprintf("%s's timeline holds posts %v twice", reader, d))
				}
				in := map[int64]bool{}
				byAuthor := map[string]int{}
				for _, p := range got {
					in[p.ID] = true
					byAuthor[p.Author]++
				}
				var want []feedblock.Post
				for _, a := range followed[reader] {
					want = append(want, posts[a]...)
				}
				for a, n := range byAuthor {
					acks := 0
					if slices.Contains(followed[reader], a) {
						acks = len(posts[a]) + unanswered[a]
					}
					if n > acks {
						bad = append(bad, fmt.Sprintf("%s's timeline holds %d posts of %s, who published at most %d it may see", reader, n, a, acks))
					}
				}
				slices.SortFunc(want, func(x, y feedblock.Post) int { return cmp.Compare(y.Score, x.Score) })
				for _, p := range want[:min(len(want), 1500)] {
					if !in[p.ID] {
						bad = append(bad, fmt.Sprintf("%s's timeline lacks post %d of %s (acknowledged)", reader, p.ID, p.Author))
					}
				}
			}
			return bad
		},
	}, nil
}

// each calls fn for every item from 16 goroutines, until ctx ends.
func each[T any](ctx context.Context, items []T, fn func(context.Context, T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for it := range work {
				fn(ctx, it)
			}
		})
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		work <- it
	}
	close(work)
	wg.Wait()
}

// soakHotlist: one repost (weight 1) of one of 300 items per tick, appended
// to an in-memory log of 4 partitions (a broker that never loses a
// message), which one consumer per partition aggregates into Redis through
// an Aggregator, re-claiming the partition when a flush cannot be trusted.
// The clock stands still, so an item's heat is exactly its reposts: once
// every offset is applied, Top holds every item at exactly its count —
// each event counted once whatever the faults did to the flushes.
func soakHotlist(ctx context.Context, rdb redis.UniversalClient, _ *sqlx.DB, ns string) (*soakBlock, error) {
	now := time.Now()
	const items, partitions = 300, 4
	list, err := hotlist.New(rdb, hotlist.Config{Name: "soak", Namespace: ns + ":hot", Partitions: partitions, Now: func() time.Time { return now }})
	if err != nil {
		return nil, err
	}
	agg, err := hotlist.NewAggregator(list, hotlist.AggregatorConfig{FlushEvery: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	var (
		mu     sync.Mutex
		logs   [partitions][][]byte // offset → batch
		counts = map[string]int64{}
	)
	read := func(p int32, from int64) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		if from >= int64(len(logs[p])) {
			return nil
		}
		return logs[p][from:]
	}
	// consume aggregates partition p until ctx ends, then until every
	// offset in its log is applied or drain ends.
	consume := func(ctx, drain context.Context, p int32) {
		for drain.Err() == nil {
			c, err := agg.Claim(drain, p)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			next := c.Resume()
			for drain.Err() == nil {
				for _, v := range read(p, next) {
					c.Add(next, v) // a bad batch is consumed and reported: none here
					next++
				}
				if c.Due() || ctx.Err() != nil {
					err := c.Flush(drain)
					if errors.Is(err, hotlist.ErrResync) || errors.Is(err, hotlist.ErrClosed) {
						break // claim again from what Redis has applied
					}
					if err == nil && ctx.Err() != nil && c.Applied() == next-1 && len(read(p, next)) == 0 {
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	run, stopRun := context.WithCancel(context.Background())
	drain, stopDrain := context.WithCancel(context.Background())
	var consumers sync.WaitGroup
	for p := range int32(partitions) {
		consumers.Go(func() { consume(run, drain, p) })
	}
	return &soakBlock{
		name:  "hotlist (events through an Aggregator)",
		close: func() { stopRun(); stopDrain(); consumers.Wait() },
		op: func(_ context.Context, i int64) outcome {
			item := "i" + strconv.Itoa(rand.IntN(items))
			batch, err := hotlist.AppendBatch(nil, []hotlist.Event{{Item: item, Kind: hotlist.Repost, At: now}})
			if err != nil {
				return unknown
			}
			p := hotlist.PartitionOf(item, partitions)
			mu.Lock()
			defer mu.Unlock()
			logs[p] = append(logs[p], batch)
			counts[item]++
			return acked
		},
		settle: func(ctx context.Context) error {
			stopRun() // consumers apply what is left, then return
			done := make(chan struct{})
			go func() { consumers.Wait(); close(done) }()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				stopDrain()
				<-done
				return fmt.Errorf("partitions not drained: %w", ctx.Err())
			}
		},
		check: func(ctx context.Context) []string {
			top, err := list.Top(ctx, items)
			if err != nil {
				return []string{"Top: " + err.Error()}
			}
			mu.Lock()
			defer mu.Unlock()
			var bad []string
			if len(top) != len(counts) {
				bad = append(bad, fmt.Sprintf("Top holds %d items, %d were reposted", len(top), len(counts)))
			}
			for _, e := range top {
				if want := float64(counts[e.Item]); math.Abs(e.Heat-want) > 1e-6*want {
					bad = append(bad, fmt.Sprintf("%s: heat %v, reposted %v times", e.Item, e.Heat, want))
				}
			}
			return bad
		},
	}, nil
}

// every calls fn every interval in the background until the returned stop,
// which waits for the call under way and may be called again.
func every(interval time.Duration, fn func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	})
	return sync.OnceFunc(func() { cancel(); wg.Wait() })
}
