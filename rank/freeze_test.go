package rank_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/rank"
)

// day is the period of the tests' daily boards: the day before yesterday
// (UTC) on the test clock, so that it has ended by the wall clock too.
var day = testenv.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)

// retention keeps the daily boards' keys in Redis, whose clock no test
// clock offset moves, for years whatever CASEBOOK_TEST_CLOCK_OFFSET says.
const retention = 3650 * 24 * time.Hour

func newFreezer(t testing.TB, db *sqlx.DB, cfg rank.FreezerConfig) *rank.Freezer {
	t.Helper()
	f, err := rank.NewFreezer(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

// reopen opens a second pool on db's database, as another process would.
func reopen(t testing.TB, db *sqlx.DB) *sqlx.DB {
	t.Helper()
	other, err := sqlx.Open(testenv.Location(t, db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return other
}

// otherClient is a second Redis client on r's server, where r has a
// single-node client.
func otherClient(t testing.TB, r *testenv.Redis) redis.UniversalClient {
	c, ok := r.Client.(*redis.Client)
	if !ok {
		return r.Client
	}
	o := redis.NewClient(c.Options())
	t.Cleanup(func() { o.Close() })
	return o
}

// dailyBoard is the board of day on a Daily Periodic, with the clock at
// the day's first hour.
func dailyBoard(t testing.TB, c redis.UniversalClient, ns string, cfg rank.Config, clock *testenv.Clock) *rank.Board {
	t.Helper()
	clock.Set(day.Add(time.Hour))
	cfg.Namespace, cfg.Now = ns, clock.Now
	p, err := rank.NewPeriodic(c, rank.PeriodicConfig{Board: cfg, Period: rank.Daily, Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.At(day)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fill writes members m00..m29 with scores 0..4 (six ties at each), one
// clock millisecond apart, and metadata on a few.
func fill(t testing.TB, b *rank.Board, clock *testenv.Clock) {
	t.Helper()
	ctx := context.Background()
	for i := range 30 {
		clock.Add(time.Millisecond)
		m := fmt.Sprintf("m%02d", i)
		if _, err := b.Set(ctx, m, int64(i*7%5)); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			if err := b.SetMeta(ctx, m, "meta-"+m); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sameStandings fails t unless got is want, entry by entry, with places
// 1, 2, 3… and metadata as SetMeta left it (fill).
func sameStandings(t testing.TB, got []rank.Final, want []rank.Entry, firstPlace int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d frozen entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		meta := ""
		if n := strings.TrimPrefix(w.Member, "m"); n != w.Member {
			if k, err := strconv.Atoi(n); err == nil && k%4 == 0 {
				meta = "meta-" + w.Member
			}
		}
		if g.Member != w.Member || g.Score != w.Score || g.Rank != w.Rank || !g.At.Equal(w.At) || g.Place != firstPlace+int64(i) || g.Meta != meta {
			t.Fatalf("frozen #%d = %+v, want %+v at place %d, meta %q", i, g, w, firstPlace+int64(i), meta)
		}
	}
}

// count returns the rows of table for board.
func count(t testing.TB, db *sqlx.DB, table, board string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, "SELECT COUNT(*) FROM "+table+" WHERE board = ?", board); err != nil {
		t.Fatal(err)
	}
	return n
}

func expectRows(t testing.TB, db *sqlx.DB, board string, headers, n int) {
	t.Helper()
	h, f, p := count(t, db, "rank_freeze", board), count(t, db, "rank_final", board), count(t, db, "rank_prize_outbox", board)
	if h != headers || f != n || p != n {
		t.Fatalf("%s: %d headers, %d standings, %d prizes; want %d, %d, %d", board, h, f, p, headers, n, n)
	}
}

// TestFreezeEqualsTop: a daily board is refused until its day ends, then
// frozen as Top(n) stood — ties, both orders, every Ties mode, sharded —
// and read back whole, by pages and by member.
func TestFreezeEqualsTop(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	f := newFreezer(t, db, rank.FreezerConfig{Namespace: r.Namespace, Now: testenv.Now})
	for _, tc := range []struct {
		name   string
		shards int
		order  rank.Order
		ties   rank.Ties
		n      int
	}{
		{"desc-ordinal-1", 1, rank.Descending, rank.Ordinal, 10},
		{"asc-competition-7", 7, rank.Ascending, rank.Competition, 13},
		{"desc-dense-7", 7, rank.Descending, rank.Dense, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := testenv.NewClock(day)
			b := dailyBoard(t, r.Client, r.Namespace, rank.Config{Name: tc.name, Shards: tc.shards, Order: tc.order, Ties: tc.ties}, clock)
			fill(t, b, clock)
			name := tc.name + ":" + day.Format(time.DateOnly)

			clock.Set(day.Add(24*time.Hour - time.Nanosecond))
			if _, err := f.Freeze(ctx, b, tc.n); !errors.Is(err, rank.ErrNotEnded) {
				t.Fatalf("Freeze before the end: %v, want ErrNotEnded", err)
			}
			expectRows(t, db, name, 0, 0)
			if _, err := f.Standings(ctx, name, 0, 10); !errors.Is(err, rank.ErrNotFrozen) {
				t.Fatalf("Standings before the freeze: %v, want ErrNotFrozen", err)
			}

			clock.Set(day.Add(24 * time.Hour))
			top, err := b.Top(ctx, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			fr, err := f.Freeze(ctx, b, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !fr.Fresh || fr.Board != name || fr.N != tc.n || !fr.At.Equal(clock.Now()) {
				t.Fatalf("Freeze = %+v", fr)
			}
			sameStandings(t, fr.Standings, top, 1)
			want := min(tc.n, 30)
			expectRows(t, db, name, 1, want)

			all, err := f.Standings(ctx, name, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			sameStandings(t, all, top, 1)
			page, err := f.Standings(ctx, name, 4, 3)
			if err != nil {
				t.Fatal(err)
			}
			sameStandings(t, page, top[4:7], 5)
			if past, err := f.Standings(ctx, name, want, 10); err != nil || len(past) != 0 {
				t.Fatalf("Standings past the end: %v, %v", past, err)
			}
			last := top[len(top)-1]
			if got, err := f.FinalRank(ctx, name, last.Member); err != nil || got.Rank != last.Rank || got.Place != int64(want) {
				t.Fatalf("FinalRank(%s) = %+v, %v; want rank %d, place %d", last.Member, got, err, last.Rank, want)
			}
		})
	}
}

// TestFreezeLateWrites: a board without a period is frozen when asked;
// what is written to it afterwards never reaches the frozen standings.
func TestFreezeLateWrites(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	f := newFreezer(t, db, rank.FreezerConfig{Namespace: r.Namespace})
	clock := testenv.NewClock(day)
	b := newBoardWith(t, r, rank.Config{Name: "open", Shards: 3, Ties: rank.Competition, Now: clock.Now})
	fill(t, b, clock)
	top, err := b.Top(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Freeze(ctx, b, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Set(ctx, "late", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, top[4].Member, 50); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, top[0].Member); err != nil {
		t.Fatal(err)
	}
	again, err := f.Freeze(ctx, b, 7) // already frozen: the stored five
	if err != nil || again.Fresh || again.N != 5 {
		t.Fatalf("second Freeze: %+v, %v", again, err)
	}
	sameStandings(t, again.Standings, top, 1)
	got, err := f.Standings(ctx, "open", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	sameStandings(t, got, top, 1)
	if _, err := f.FinalRank(ctx, "open", "late"); !errors.Is(err, rank.ErrNotFound) {
		t.Fatalf("FinalRank of a late member: %v, want ErrNotFound", err)
	}
	expectRows(t, db, "open", 1, 5)
}

// TestFreezeExactlyOnce: freezers in two "processes" (their own SQL pools
// and Redis clients) race to freeze one board from 8 goroutines, and then
// one retries as after a lost reply: one set of rows, one prize per member,
// every caller the same standings, exactly one of them Fresh.
func TestFreezeExactlyOnce(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	clock := testenv.NewClock(day)
	cfg := rank.Config{Name: "race", Shards: 4, Ties: rank.Dense}
	boards := []*rank.Board{dailyBoard(t, r.Client, r.Namespace, cfg, clock), dailyBoard(t, otherClient(t, r), r.Namespace, cfg, clock)}
	fill(t, boards[0], clock)
	clock.Set(day.Add(25 * time.Hour))
	freezers := []*rank.Freezer{newFreezer(t, db, rank.FreezerConfig{Namespace: r.Namespace}), newFreezer(t, reopen(t, db), rank.FreezerConfig{Namespace: r.Namespace})}
	top, err := boards[1].Top(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	results := make([]rank.Frozen, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = freezers[i%2].Freeze(ctx, boards[i%2], 20) })
	}
	wg.Wait()
	fresh := 0
	for i, fr := range results {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if fr.Fresh {
			fresh++
		}
		sameStandings(t, fr.Standings, top, 1)
	}
	if fresh != 1 {
		t.Fatalf("%d racers wrote the freeze, want 1", fresh)
	}
	name := "race:" + day.Format(time.DateOnly)
	expectRows(t, db, name, 1, 20)

	retry, err := newFreezer(t, reopen(t, db), rank.FreezerConfig{Namespace: r.Namespace}).Freeze(ctx, boards[0], 20)
	if err != nil || retry.Fresh {
		t.Fatalf("retried Freeze: fresh %v, %v", retry.Fresh, err)
	}
	sameStandings(t, retry.Standings, top, 1)
	clock.Set(day.Add(24*time.Hour + retention)) // the board's keys are gone, its freeze is not
	if late, err := freezers[0].Freeze(ctx, boards[0], 20); err != nil || late.Fresh || len(late.Standings) != 20 {
		t.Fatalf("Freeze after the board expired: %d entries, fresh %v, %v", len(late.Standings), late.Fresh, err)
	}
	expectRows(t, db, name, 1, 20)

	pub := &testenv.Published{}
	for range 2 { // the second relays nothing more
		if _, err := freezers[1].RelayPrizes(ctx, pub, "prizes", 7); err != nil {
			t.Fatal(err)
		}
	}
	for {
		n, err := freezers[0].RelayPrizes(ctx, pub, "prizes", 7)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	msgs := pub.Take()
	if len(msgs) != 20 {
		t.Fatalf("%d prize messages, want 20", len(msgs))
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		p, err := rank.DecodePrize(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		w := top[p.Place-1]
		if seen[p.ID] || string(m.Key) != p.Member || p.Member != w.Member || p.Rank != w.Rank || p.Score != w.Score || p.Of != 20 || p.Board != name {
			t.Fatalf("prize %+v (key %q), want %+v once", p, m.Key, w)
		}
		seen[p.ID] = true
	}
	if _, err := rank.DecodePrize([]byte(`{"v":1,"id":"x/y","board":"x","member":"z","rank":1,"place":1,"score":1,"of":1,"at":1}`)); !errors.Is(err, rank.ErrBadPrize) {
		t.Fatalf("DecodePrize of a forged id: %v", err)
	}
}

// TestFreezeBadInput: every refusal writes nothing.
func TestFreezeBadInput(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	if _, err := rank.NewFreezer(nil, rank.FreezerConfig{}); !errors.Is(err, rank.ErrConfig) {
		t.Fatalf("NewFreezer(nil): %v, want ErrConfig", err)
	}
	f := newFreezer(t, db, rank.FreezerConfig{Namespace: r.Namespace})
	clock := testenv.NewClock(day)
	b := dailyBoard(t, r.Client, r.Namespace, rank.Config{Name: "bad"}, clock)
	fill(t, b, clock)
	long := newBoardWith(t, r, rank.Config{Name: strings.Repeat("x", 129)})
	for _, tc := range []struct {
		name string
		b    *rank.Board
		n    int
		want error
	}{
		{"zero", b, 0, rank.ErrInvalid},
		{"negative", b, -1, rank.ErrInvalid},
		{"too many", b, 10001, rank.ErrInvalid},
		{"nil board", nil, 10, rank.ErrInvalid},
		{"long name", long, 10, rank.ErrInvalid},
		{"not ended", b, 10, rank.ErrNotEnded},
		{"expired", b, 10, rank.ErrTimeRange},
	} {
		if tc.name == "expired" {
			clock.Set(day.Add(24*time.Hour + retention))
		}
		if _, err := f.Freeze(ctx, tc.b, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, table := range []string{"rank_freeze", "rank_final", "rank_prize_outbox"} {
		var n int
		if err := db.Get(&n, "SELECT COUNT(*) FROM "+table); err != nil || n != 0 {
			t.Fatalf("%s has %d rows (%v) after refusals", table, n, err)
		}
	}
	for _, tc := range []struct{ offset, n int }{{0, 0}, {-1, 5}, {0, 1001}} {
		if _, err := f.Standings(ctx, "bad", tc.offset, tc.n); !errors.Is(err, rank.ErrInvalid) {
			t.Errorf("Standings(%d, %d): %v, want ErrInvalid", tc.offset, tc.n, err)
		}
	}
	if _, err := f.FinalRank(ctx, "bad", "m00"); !errors.Is(err, rank.ErrNotFrozen) {
		t.Errorf("FinalRank before a freeze: %v, want ErrNotFrozen", err)
	}
	if _, err := f.RelayPrizes(ctx, &testenv.Published{}, "prizes", 0); !errors.Is(err, rank.ErrInvalid) {
		t.Errorf("RelayPrizes batch 0: %v, want ErrInvalid", err)
	}
}

// TestFreezeMetrics: the freezer's operations, counted exactly, refusals
// with their reasons.
func TestFreezeMetrics(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	r := testenv.NewRedis(t)
	f := newFreezer(t, testenv.NewSQL(t), rank.FreezerConfig{Namespace: r.Namespace, MeterProvider: mp, TracerProvider: tp})
	clock := testenv.NewClock(day)
	b := dailyBoard(t, r.Client, r.Namespace, rank.Config{Name: "observed"}, clock)
	fill(t, b, clock)
	name := "observed:" + day.Format(time.DateOnly)
	want := map[string]float64{}
	expect := func(op string, err, wantErr error, reason string) {
		t.Helper()
		if !errors.Is(err, wantErr) {
			t.Fatalf("%s: %v, want %v", op, err, wantErr)
		}
		outcome := "ok"
		if reason != "" {
			outcome = "refused"
		}
		obstest.AddOp(want, "rank", op, outcome, reason, 1)
	}
	_, err := f.Freeze(ctx, b, 3)
	expect("freeze", err, rank.ErrNotEnded, "not_ended")
	_, err = f.Freeze(ctx, b, 0)
	expect("freeze", err, rank.ErrInvalid, "invalid")
	_, err = f.Standings(ctx, name, 0, 3)
	expect("standings", err, rank.ErrNotFrozen, "not_frozen")
	clock.Set(day.Add(24 * time.Hour))
	_, err = f.Freeze(ctx, b, 3)
	expect("freeze", err, nil, "")
	_, err = f.Freeze(ctx, b, 3)
	expect("freeze", err, nil, "")
	_, err = f.Standings(ctx, name, 0, 3)
	expect("standings", err, nil, "")
	_, err = f.FinalRank(ctx, name, "nobody")
	expect("final_rank", err, rank.ErrNotFound, "not_found")
	_, err = f.RelayPrizes(ctx, &testenv.Published{}, "prizes", 10)
	expect("relay_prizes", err, nil, "")
	obstest.Expect(t, obstest.Points(t, reader), want)
	wantSpans := map[string]int{}
	for k, n := range want {
		if op, ok := cutOp(k); ok {
			wantSpans["rank."+op] += int(n)
		}
	}
	obstest.ExpectSpans(t, spans, wantSpans)
}

// TestFreezeCommitReplyLost: the freeze commits but its reply is lost on
// the way back (MySQL through the fault proxy); the caller's retry finds
// the freeze and returns it, and nothing is written twice.
func TestFreezeCommitReplyLost(t *testing.T) {
	ctx := context.Background()
	sqlf := testenv.NewFaultySQL(t, 1)
	r := testenv.NewRedis(t)
	f := newFreezer(t, sqlf.DBs[0], rank.FreezerConfig{Namespace: r.Namespace})
	clock := testenv.NewClock(day)
	b := dailyBoard(t, r.Client, r.Namespace, rank.Config{Name: "lost", Shards: 2, Ties: rank.Competition}, clock)
	fill(t, b, clock)
	clock.Set(day.Add(24 * time.Hour))
	top, err := b.Top(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	sqlf.DropReplyTo("COMMIT", 1)
	if fr, err := f.Freeze(ctx, b, 12); err == nil && !fr.Fresh {
		t.Fatalf("first Freeze: %+v", fr)
	}
	if sqlf.Cuts() != 1 {
		t.Fatalf("%d replies lost, want the commit's", sqlf.Cuts())
	}
	retry, err := f.Freeze(ctx, b, 12)
	if err != nil || retry.Fresh {
		t.Fatalf("retried Freeze: fresh %v, %v", retry.Fresh, err)
	}
	sameStandings(t, retry.Standings, top, 1)
	expectRows(t, sqlf.Direct[0], "lost:"+day.Format(time.DateOnly), 1, 12)
}

// A daily board's final standings, frozen once its day is over, with a
// prize message per winner.
func ExampleFreezer() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr)) // your redis.UniversalClient
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	s, err := devstack.OpenSQL(ctx, os.Getenv(devstack.EnvMySQLDSN), "example") // your *sqlx.DB
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")

	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	now := yesterday.Add(time.Hour)
	clock := func() time.Time { return now }
	daily, _ := rank.NewPeriodic(r.Client, rank.PeriodicConfig{
		Board: rank.Config{Name: "arena", Namespace: ns, Now: clock}, Period: rank.Daily, Retention: 7 * 24 * time.Hour})
	board, _ := daily.At(yesterday)
	board.Set(ctx, "alice", 300)
	board.Set(ctx, "bob", 500)
	board.Set(ctx, "carol", 100)

	freezer, _ := rank.NewFreezer(s.DB, rank.FreezerConfig{Namespace: ns})
	if err := freezer.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := freezer.Freeze(ctx, board, 2); errors.Is(err, rank.ErrNotEnded) {
		fmt.Println("not yet")
	}
	now = yesterday.Add(24 * time.Hour)
	frozen, _ := freezer.Freeze(ctx, board, 2)
	board.Set(ctx, "carol", 900) // refused: the day is over; and the freeze is final anyway
	for _, f := range frozen.Standings {
		fmt.Printf("#%d %s %d\n", f.Rank, f.Member, f.Score)
	}
	freezer.RelayPrizes(ctx, outbox.Direct(func(_ context.Context, key, value []byte) error {
		p, err := rank.DecodePrize(value)
		fmt.Println("prize for", string(key), "rank", p.Rank, err)
		return err
	}), "prizes", 100)
	// Output:
	// not yet
	// #1 bob 500
	// #2 alice 300
	// prize for bob rank 1 <nil>
	// prize for alice rank 2 <nil>
}

// Two namespaces freeze a board of the same name in one database: each
// sees its own standings and prizes; a freezer refuses another
// namespace's board.
func TestFreezeNamespaces(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	clock := testenv.NewClock(day)
	var boards []*rank.Board
	var freezers []*rank.Freezer
	for i, ns := range []string{r.Namespace + ":a", r.Namespace + ":b"} {
		b, err := rank.New(r.Client, rank.Config{Name: "same", Namespace: ns, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testenv.DeleteKeys(ctx, r.Client, ns+"*") })
		if _, err := b.Set(ctx, fmt.Sprint("member-of-", i), int64(10*(i+1))); err != nil {
			t.Fatal(err)
		}
		boards, freezers = append(boards, b), append(freezers, newFreezer(t, db, rank.FreezerConfig{Namespace: ns}))
	}
	if _, err := freezers[0].Freeze(ctx, boards[1], 5); !errors.Is(err, rank.ErrInvalid) {
		t.Fatalf("a freezer froze another namespace's board: %v", err)
	}
	pub := &testenv.Published{}
	for i, f := range freezers {
		fr, err := f.Freeze(ctx, boards[i], 5)
		if err != nil || !fr.Fresh || len(fr.Standings) != 1 || fr.Standings[0].Member != fmt.Sprint("member-of-", i) {
			t.Fatalf("namespace %d: %+v, %v", i, fr, err)
		}
		if n, err := f.RelayPrizes(ctx, pub, "prizes", 10); n != 1 || err != nil {
			t.Fatalf("namespace %d relayed %d prizes: %v", i, n, err)
		}
	}
	ids := map[string]bool{}
	for _, m := range pub.Take() {
		p, err := rank.DecodePrize(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		ids[p.ID] = true
	}
	if len(ids) != 2 {
		t.Fatalf("prize ids %v, want two distinct", ids)
	}
}
