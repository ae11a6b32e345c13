package signin_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// layouts are the storage layouts the behaviour tests run on, expecting the
// same results from each.
var layouts = []signin.Layout{signin.Bitmaps, signin.Packed}

// eachLayout runs f as one subtest per layout.
func eachLayout(t *testing.T, f func(t *testing.T, l signin.Layout)) {
	for _, l := range layouts {
		t.Run(l.String(), func(t *testing.T) { f(t, l) })
	}
}

// newService opens a Service in the test's namespace; Packed is sized for
// 1,000 users unless cfg says otherwise.
func newService(t *testing.T, r *testenv.Redis, clk *testenv.Clock, cfg signin.Config) *signin.Service {
	t.Helper()
	cfg.Namespace = r.Namespace
	cfg.Now = clk.Now
	if cfg.Layout == signin.Packed && cfg.Users == 0 {
		cfg.Users = 1000
	}
	s, err := signin.New(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newLedger(t *testing.T, opts ...signin.LedgerOption) (*signin.Ledger, *sqlx.DB) {
	t.Helper()
	db := testenv.NewSQL(t)
	l, err := signin.NewLedger(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l, db
}

// pipeline is the reward path: outbox streams → relay → Kafka → Ledger.
type pipeline struct {
	t       *testing.T
	relay   *outbox.Relay
	brokers []string
	topic   string
	group   string
}

func newPipeline(t *testing.T, r *testenv.Redis, s *signin.Service, pub outbox.Publisher) *pipeline {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 4)
	if pub == nil {
		pub = dial(t, brokers)
	}
	return &pipeline{t: t, relay: outbox.NewRelay(r.Client, s.Outboxes(), topic, pub), brokers: brokers, topic: topic, group: "ledger-" + topic}
}

func dial(t *testing.T, brokers []string) *kafka.Publisher {
	t.Helper()
	p, err := kafka.Dial(brokers, "signin-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// deliver relays everything pending and has the ledger consume it; it
// returns how many messages the ledger handled.
func (p *pipeline) deliver(ctx context.Context, l *signin.Ledger) int {
	n := p.drain(ctx)
	if n > 0 {
		p.consume(ctx, l, int64(n))
	}
	return n
}

// drain relays until the outbox is empty and returns the entries relayed
// (counting a batch whose acknowledgement was lost once).
func (p *pipeline) drain(ctx context.Context) int {
	p.t.Helper()
	relayed := 0
	for range 5 { // a pass that fails leaves entries for the next
		n, _ := p.relay.DrainAll(ctx)
		relayed += n
		if pending, _ := p.relay.Pending(ctx); pending == 0 {
			return relayed
		}
	}
	p.t.Fatal("reward tasks stuck in the outbox")
	return 0
}

// consume has the ledger handle messages with p.group until n were settled;
// it returns how many were poison.
func (p *pipeline) consume(ctx context.Context, l *signin.Ledger, n int64) int64 {
	p.t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := kafka.ConsumeN(cctx, p.brokers, p.group, []string{p.topic}, n, l.Handle, kafka.ConsumerConfig{})
	if err != nil {
		p.t.Fatal(err)
	}
	if c.Handled()+c.Poisoned() < n {
		p.t.Fatalf("ledger settled %d of %d messages", c.Handled()+c.Poisoned(), n)
	}
	return c.Poisoned()
}

// y0 is the year the tests' dates fall in: the first year from the test
// clock's on that is 2026 modulo 4, so that y0+2 is a leap year, as the
// dates were written (2026–2028). Never a past year: a user-year's key
// expires on its own clock at the start of its third year after (expiry).
var y0 = func() int {
	y := testenv.Now().Year()
	return y + ((2026-y)%4+4)%4
}()

func day(y int, m time.Month, d int) signin.Date { return signin.Date{Year: y, Month: m, Day: d} }

// noon is midday UTC of d, comfortably inside the day in UTC.
func noon(d signin.Date) time.Time { return time.Date(d.Year, d.Month, d.Day, 12, 0, 0, 0, time.UTC) }

// 1000 goroutines sign 100 users in on one day: each user is signed once and
// rewarded once.
func TestConcurrentSignsGrantOnce(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
			ctx := context.Background()
			clk := &testenv.Clock{}
			clk.Set(noon(day(y0, 11, 30)))
			s := newService(t, r, clk, signin.Config{Buckets: 16, Layout: l})
			ledger, _ := newLedger(t)
			var fresh, repeat atomic.Int64
			var wg sync.WaitGroup
			for g := range 1000 {
				wg.Go(func() {
					res, err := s.Sign(ctx, fmt.Sprintf("user-%d", g%100), clk.Now())
					switch {
					case err != nil:
						t.Error(err)
					case res.AlreadySigned && res.Points == 0 && res.Streak == 1:
						repeat.Add(1)
					case !res.AlreadySigned && res.Points == 10 && res.Streak == 1:
						fresh.Add(1)
					default:
						t.Errorf("unexpected %+v", res)
					}
				})
			}
			wg.Wait()
			if fresh.Load() != 100 || repeat.Load() != 900 {
				t.Fatalf("%d fresh sign-ins and %d repeats, want 100 and 900", fresh.Load(), repeat.Load())
			}
			p := newPipeline(t, r, s, nil)
			if n := p.deliver(ctx, ledger); n != 100 {
				t.Fatalf("%d reward tasks, want 100", n)
			}
			for u := range 100 {
				user := fmt.Sprintf("user-%d", u)
				bal, _ := ledger.Balance(ctx, user)
				rows, _ := ledger.Entries(ctx, user)
				if bal != 10 || rows != 1 {
					t.Fatalf("%s: balance %d in %d rows, want 10 in 1", user, bal, rows)
				}
			}
		})
	})
}

// Thirty days from 17 December to 15 January: the streak runs on across the
// year end, with the bonus on days 7, 14, 21 and 28 exactly.
func TestStreakAcrossYearEnd(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedisCluster(t)
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Layout: l})
		ledger, _ := newLedger(t)
		start := day(y0, 12, 17)
		var total int64
		for i := 1; i <= 30; i++ {
			d := start.AddDays(i - 1)
			clk.Set(noon(d))
			res, err := s.Sign(ctx, "ann", clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			want := int64(10)
			if i%7 == 0 {
				want = 110
			}
			if res.Streak != i || res.Points != want || res.AlreadySigned || res.Date != d {
				t.Fatalf("day %d (%s): %+v, want streak %d and %d points", i, d, res, i, want)
			}
			if st, _ := s.Streak(ctx, "ann", clk.Now()); st != i {
				t.Fatalf("Streak on day %d = %d", i, st)
			}
			total += res.Points
		}
		if total != 30*10+4*100 {
			t.Fatalf("%d points recorded", total)
		}
		// A gap restarts the streak (and Streak holds yesterday's run until the
		// day is over).
		clk.Set(noon(start.AddDays(30)))
		if st, _ := s.Streak(ctx, "ann", clk.Now()); st != 30 {
			t.Fatalf("next morning, before signing: streak %d, want 30", st)
		}
		clk.Set(noon(start.AddDays(31)))
		if res, _ := s.Sign(ctx, "ann", clk.Now()); res.Streak != 1 {
			t.Fatalf("after a gap: streak %d, want 1", res.Streak)
		}
		p := newPipeline(t, r, s, nil)
		p.deliver(ctx, ledger)
		if bal, _ := ledger.Balance(ctx, "ann"); bal != 700+10 {
			t.Fatalf("balance %d, want 710", bal)
		}
		if n, _ := ledger.Entries(ctx, "ann"); n != 31+4 {
			t.Fatalf("%d ledger rows, want 35", n)
		}
	})
}

// Days are local days: 23:30 and 00:30 local are two days, whichever side of
// UTC midnight they fall on.
func TestTimeZoneEdges(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		shanghai, _ := time.LoadLocation("Asia/Shanghai")
		la, _ := time.LoadLocation("America/Los_Angeles")
		zones := map[string]*time.Location{"sh": shanghai, "la": la}
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Layout: l, UserLocation: func(u string) *time.Location { return zones[u] }})
		for user, loc := range zones {
			late := time.Date(y0, 11, 29, 23, 30, 0, 0, loc)
			early := time.Date(y0, 11, 30, 0, 30, 0, 0, loc)
			a, err1 := s.Sign(ctx, user, late)
			b, err2 := s.Sign(ctx, user, early)
			if err1 != nil || err2 != nil || a.AlreadySigned || b.AlreadySigned || b.Streak != 2 {
				t.Fatalf("%s: %+v %v / %+v %v", user, a, err1, b, err2)
			}
			if a.Date != day(y0, 11, 29) || b.Date != day(y0, 11, 30) {
				t.Fatalf("%s: local days %s and %s", user, a.Date, b.Date)
			}
			// Another sign-in an hour later is the same local day.
			if c, _ := s.Sign(ctx, user, early.Add(time.Hour)); !c.AlreadySigned {
				t.Fatalf("%s: 01:30 local counted as a new day", user)
			}
		}
		// The same instant is Nov 30 in Shanghai (08:30) and Nov 29 in LA.
		at := time.Date(y0, 11, 30, 0, 30, 0, 0, time.UTC)
		if signin.DateOf(at, shanghai) != day(y0, 11, 30) || signin.DateOf(at, la) != day(y0, 11, 29) {
			t.Fatal("DateOf ignores the zone")
		}
		if _, err := s.Sign(ctx, "", at); !errors.Is(err, signin.ErrInvalidUser) {
			t.Fatalf("empty user: %v", err)
		}
	})
}

// A make-up day bridges a gap: the streak through the joined run is
// recomputed and the bonus now due on day 7 is granted, once.
func TestMakeUpBridgesGap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Layout: l})
		ledger, _ := newLedger(t)
		for _, d := range []int{1, 2, 3, 5, 6, 7, 8} {
			clk.Set(noon(day(y0+1, 1, d)))
			if _, err := s.Sign(ctx, "bo", clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if st, _ := s.Streak(ctx, "bo", clk.Now()); st != 4 {
			t.Fatalf("streak before make-up %d, want 4", st)
		}
		if _, err := s.MakeUp(ctx, "bo", day(y0+1, 1, 4)); !errors.Is(err, signin.ErrNoCard) {
			t.Fatalf("without a card: %v", err)
		}
		s.AddCards(ctx, "bo", 2)
		res, err := s.MakeUp(ctx, "bo", day(y0+1, 1, 4))
		if err != nil || res.Streak != 8 || res.Points != 110 {
			t.Fatalf("make-up: %+v, %v; want streak 8 and 10+100 points", res, err)
		}
		if st, _ := s.Streak(ctx, "bo", clk.Now()); st != 8 {
			t.Fatalf("streak after make-up %d, want 8", st)
		}
		if _, err := s.MakeUp(ctx, "bo", day(y0+1, 1, 4)); !errors.Is(err, signin.ErrAlreadySigned) {
			t.Fatalf("second make-up of the day: %v", err)
		}
		for _, d := range []signin.Date{day(y0+1, 1, 8), day(y0+1, 1, 9), day(y0, 12, 31)} {
			if _, err := s.MakeUp(ctx, "bo", d); !errors.Is(err, signin.ErrOutsideWindow) {
				t.Fatalf("make-up of %s: %v, want ErrOutsideWindow", d, err)
			}
		}
		p := newPipeline(t, r, s, nil)
		p.deliver(ctx, ledger)
		// 8 daily rewards, one bonus (day 7), nothing twice.
		if bal, _ := ledger.Balance(ctx, "bo"); bal != 8*10+100 {
			t.Fatalf("balance %d, want 180", bal)
		}
		// The card spent on the refused second make-up was not consumed.
		if res, err := s.MakeUp(ctx, "bo", day(y0+1, 1, 2)); !errors.Is(err, signin.ErrAlreadySigned) {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

// A make-up on 31 December joins a run that goes on into January.
func TestMakeUpAcrossYearEnd(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Layout: l})
		for d := day(y0, 12, 26); d.Before(day(y0+1, 1, 3)); d = d.AddDays(1) {
			if d == day(y0, 12, 31) {
				continue
			}
			clk.Set(noon(d))
			s.Sign(ctx, "cy", clk.Now())
		}
		s.AddCards(ctx, "cy", 1)
		res, err := s.MakeUp(ctx, "cy", day(y0, 12, 31))
		if err != nil || res.Streak != 8 || res.Points != 110 {
			t.Fatalf("%+v, %v; want streak 8, bonus for 1 January (day 7)", res, err)
		}
	})
}

// Duplicated deliveries, replays, concurrent consumers and a relay that
// crashed between sending and deleting never grant twice.
func TestRewardsExactlyOnce(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := &testenv.Clock{}
	clk.Set(noon(day(y0, 11, 30)))
	s := newService(t, r, clk, signin.Config{Buckets: 4})
	ledger, _ := newLedger(t)

	task := signin.Task{User: "dup", Date: fmt.Sprintf("%d-11-30", y0), Kind: "daily", Points: 10}
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ok, err := ledger.Grant(ctx, task)
			if err != nil {
				t.Error(err)
			}
			if ok {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if granted.Load() != 1 {
		t.Fatalf("20 concurrent grants of one task granted %d times", granted.Load())
	}

	// The relay sends, then "crashes" before deleting: everything goes out
	// again on the next pass.
	brokers := testenv.Kafka(t)
	send := &crashAfterSend{p: dial(t, brokers), crashes: 1}
	for u := range 10 {
		s.Sign(ctx, fmt.Sprintf("u%d", u), clk.Now())
	}
	p := newPipeline(t, r, s, send)
	if n := p.drain(ctx); n != 10 {
		t.Fatalf("relayed %d, want 10", n)
	}
	if send.lost == 0 {
		t.Fatal("the crash was not exercised")
	}
	p.consume(ctx, ledger, int64(10+send.lost)) // the lost batch is in Kafka twice
	for u := range 10 {
		if bal, _ := ledger.Balance(ctx, fmt.Sprintf("u%d", u)); bal != 10 {
			t.Fatalf("u%d balance %d after a duplicated relay, want 10", u, bal)
		}
	}
	// A replay of the whole topic by a new consumer group grants nothing.
	p.group += "-replay"
	before, _ := ledger.Balance(ctx, "u1")
	p.consume(ctx, ledger, int64(10+send.lost))
	if after, _ := ledger.Balance(ctx, "u1"); after != before {
		t.Fatalf("replay changed the balance %d → %d", before, after)
	}
	if _, err := ledger.Grant(ctx, signin.Task{User: "x", Date: "bad", Kind: "daily"}); !errors.Is(err, signin.ErrBadTask) {
		t.Fatalf("malformed task: %v, want ErrBadTask", err)
	}
}

// crashAfterSend sends for real and then reports failure, as if the relay
// died before deleting the entries.
type crashAfterSend struct {
	p       outbox.Publisher
	crashes int
	lost    int // messages sent whose acknowledgement was "lost"
}

func (c *crashAfterSend) Publish(ctx context.Context, ms []outbox.Message) error {
	if err := c.p.Publish(ctx, ms); err != nil {
		return err
	}
	if c.crashes > 0 {
		c.crashes--
		c.lost += len(ms)
		return errors.New("relay crashed after send")
	}
	return nil
}

// Backup → wipe → restore gives back identical histories, on a cluster.
func TestBackupRestore(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedisCluster(t)
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Buckets: 32, Layout: l})
		_, db := newLedger(t)
		rng := rand.New(rand.NewPCG(5, 6))
		users := make([]string, 40)
		for i := range users {
			users[i] = fmt.Sprintf("user:%d{x}", i) // awkward ids on purpose
			for d := 1; d <= 30; d++ {
				if rng.IntN(2) == 0 {
					clk.Set(noon(day(y0, 11, d)))
					s.Sign(ctx, users[i], clk.Now())
				}
			}
		}
		from, to := day(y0, 11, 1), day(y0, 11, 30)
		before := map[string][]signin.Date{}
		for _, u := range users {
			before[u], _ = s.History(ctx, u, from, to)
			n, _ := s.MonthCount(ctx, u, y0, time.November)
			if n != len(before[u]) {
				t.Fatalf("%s: MonthCount %d, History %d days", u, n, len(before[u]))
			}
		}
		saved, err := s.Backup(ctx, db, y0, time.November)
		if err != nil || saved == 0 {
			t.Fatalf("backup saved %d: %v", saved, err)
		}
		testenv.DeleteKeys(ctx, r.Client, r.Namespace+"*")
		for _, u := range users[:3] {
			if h, _ := s.History(ctx, u, from, to); len(h) != 0 {
				t.Fatalf("wipe left %d days", len(h))
			}
		}
		restored, err := s.Restore(ctx, db, y0, time.November)
		if err != nil || restored != saved {
			t.Fatalf("restored %d of %d: %v", restored, saved, err)
		}
		for _, u := range users {
			after, _ := s.History(ctx, u, from, to)
			if fmt.Sprint(after) != fmt.Sprint(before[u]) {
				t.Fatalf("%s: history %v after restore, %v before", u, after, before[u])
			}
		}
	})
}

// User ids are accepted only when every layer can store them (the SQL ledger
// keeps ASCII, a packed hash field at most 64 bytes): anything else is
// refused up front and writes nothing.
func TestUserIDsEveryLayerStores(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		clk := &testenv.Clock{}
		clk.Set(noon(day(y0, 3, 1)))
		s := newService(t, r, clk, signin.Config{Layout: l})
		long := strings.Repeat("x", 65)
		refused := []string{"", "名字", "a b", "tab\tuser", "nul\x00", "del\x7f", string(make([]byte, 129))}
		accepted := []string{"a", "user:1{x}", `q"uote\back`, "~!@#$%^&*()_+", strings.Repeat("y", 64)}
		if l == signin.Packed {
			refused = append(refused, long)
		} else {
			accepted = append(accepted, long, strings.Repeat("z", 128))
		}
		for _, user := range refused {
			if _, err := s.Sign(ctx, user, clk.Now()); !errors.Is(err, signin.ErrInvalidUser) {
				t.Errorf("Sign(%q): %v, want ErrInvalidUser", user, err)
			}
		}
		if n, _ := r.Client.Keys(ctx, r.Namespace+"*").Result(); len(n) != 0 {
			t.Fatalf("refused sign-ins wrote %v", n)
		}
		for _, user := range accepted {
			if _, err := s.Sign(ctx, user, clk.Now()); err != nil {
				t.Errorf("Sign(%q): %v", user, err)
			}
		}
	})
}

// A poison reward message — not JSON, an unknown format version, a user id
// SQL cannot store, an unknown kind — is skipped with a count, and the
// rewards behind it on its partition are granted.
func TestPoisonRewardsDoNotBlock(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := &testenv.Clock{}
	clk.Set(noon(day(y0, 3, 1)))
	s := newService(t, r, clk, signin.Config{})
	ledger, _ := newLedger(t)
	p := newPipeline(t, r, s, nil)
	pub := dial(t, p.brokers)
	good := func(u string) []byte {
		return signin.EncodeTask(signin.Task{User: u, Date: fmt.Sprintf("%d-03-01", y0), Kind: "daily", Points: 10})
	}
	values := [][]byte{
		good("before"),
		[]byte("not json"),
		[]byte(`{"v":2,"user":"x","date":"2026-03-01","kind":"daily","points":10}`),
		[]byte(`{"v":1,"user":"ünicode","date":"2026-03-01","kind":"daily","points":10}`),
		[]byte(`{"v":1,"user":"x","date":"2026-03-01","kind":"weekly","points":10}`),
		[]byte(`{"v":1,"user":"x","date":"2026-02-30","kind":"daily","points":10}`),
		good("after"),
	}
	var msgs []outbox.Message
	for _, v := range values { // one key: one partition, in this order
		msgs = append(msgs, outbox.Message{Topic: p.topic, Key: []byte("same"), Value: v})
	}
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if poisoned := p.consume(ctx, ledger, int64(len(values))); poisoned != 5 {
		t.Fatalf("%d messages poisoned, want 5", poisoned)
	}
	for _, u := range []string{"before", "after"} {
		if bal, _ := ledger.Balance(ctx, u); bal != 10 {
			t.Errorf("%s: balance %d, want 10", u, bal)
		}
	}
	if n, _ := ledger.Entries(ctx, "x"); n != 0 {
		t.Errorf("poison messages wrote %d ledger rows", n)
	}
}

// A namespace holding glob characters still backs up its users (and only
// its users).
func TestBackupGlobNamespace(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		clk := &testenv.Clock{}
		clk.Set(noon(day(y0, 11, 3)))
		odd, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + `:a[b]*?\`, Now: clk.Now, Layout: l, Users: 100})
		if err != nil {
			t.Fatal(err)
		}
		near, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + `:aXbYZ_\`, Now: clk.Now, Layout: l, Users: 100})
		if err != nil {
			t.Fatal(err)
		}
		odd.Sign(ctx, "mine", clk.Now())
		near.Sign(ctx, "theirs", clk.Now())
		_, db := newLedger(t)
		if saved, err := odd.Backup(ctx, db, y0, time.November); err != nil || saved != 1 {
			t.Fatalf("backup of a glob namespace saved %d users (%v), want 1", saved, err)
		}
		var users []string
		if err := db.SelectContext(ctx, &users, `SELECT user_id FROM signin_months`); err != nil || fmt.Sprint(users) != "[mine]" {
			t.Fatalf("backed up %v (%v), want [mine]", users, err)
		}
	})
}
