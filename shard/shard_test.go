package shard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shard"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func repeat(db *sqlx.DB, n int) []*sqlx.DB {
	dbs := make([]*sqlx.DB, n)
	for i := range dbs {
		dbs[i] = db
	}
	return dbs
}

// Random keys over 256 tables: every table within ±5% of the mean. With 1M
// keys (3906 a table) ±5% is only 3.1 standard deviations, which a perfect
// hash misses on some table about half the time; 4M keys make it 6.3σ.
func TestDistribution(t *testing.T) {
	r, err := shard.New(repeat(testenv.NewSQL(t), 1), shard.Config{Table: "links", TablesPerDB: 256})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 4_000_000
	counts := make([]int, r.Tables())
	rng := rand.New(rand.NewPCG(1, 2))
	for range keys {
		counts[r.ByKey(strconv.FormatUint(rng.Uint64(), 36)).Index]++
	}
	mean := float64(keys) / float64(len(counts))
	for i, c := range counts {
		if dev := (float64(c) - mean) / mean; dev > 0.05 || dev < -0.05 {
			t.Errorf("table %d holds %d keys, %.1f%% off the mean %.0f", i, c, 100*dev, mean)
		}
	}
}

func TestLayouts(t *testing.T) {
	db := testenv.NewSQL(t)
	for _, l := range []struct{ dbs, perDB int }{{1, 256}, {8, 8}, {8, 32}} {
		dbs := make([]*sqlx.DB, l.dbs)
		for i := range dbs {
			dbs[i] = &sqlx.DB{DB: db.DB} // distinct pointers stand for distinct databases
		}
		r, err := shard.New(dbs, shard.Config{Table: "orders", TablesPerDB: l.perDB})
		if err != nil {
			t.Fatal(err)
		}
		if r.Tables() != l.dbs*l.perDB {
			t.Fatalf("%d×%d: %d tables", l.dbs, l.perDB, r.Tables())
		}
		perDB := map[int]int{}
		for i, s := range r.All() {
			if s.Index != i || s.DBIndex != i/l.perDB || s.DB != dbs[i/l.perDB] || s.Table != fmt.Sprintf("orders_%03d", i) {
				t.Fatalf("%d×%d: shard %d = %+v", l.dbs, l.perDB, i, s)
			}
			perDB[s.DBIndex]++
		}
		for d := range l.dbs {
			if perDB[d] != l.perDB {
				t.Fatalf("database %d has %d tables", d, perDB[d])
			}
		}
		// A key's database and table agree with the arithmetic.
		s := r.ByKey("user-1")
		if s.DBIndex != s.Index/l.perDB {
			t.Fatalf("shard %+v", s)
		}
	}
}

// An id made with a key's gene routes to the key's table, for power-of-two
// table counts up to 2^bits.
func TestGeneRoutesLikeKey(t *testing.T) {
	db := testenv.NewSQL(t)
	genes := idgen.Genes{Bits: 8}
	for _, l := range []struct{ dbs, perDB int }{{1, 256}, {8, 8}, {8, 32}, {4, 4}} {
		r, _ := shard.New(repeat(db, l.dbs), shard.Config{Table: "orders", TablesPerDB: l.perDB})
		for i := range 10000 {
			user := "user-" + strconv.Itoa(i)
			id, err := genes.Make(int64(i)*7919, genes.Of(user))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := r.ByGene(genes.Gene(id)).Index, r.ByKey(user).Index; got != want {
				t.Fatalf("%d×%d: order %d of %s routes to table %d, user to %d", l.dbs, l.perDB, id, user, got, want)
			}
		}
	}
}

func TestConfigErrors(t *testing.T) {
	db := testenv.NewSQL(t)
	for _, c := range []struct {
		dbs []*sqlx.DB
		cfg shard.Config
	}{
		{nil, shard.Config{Table: "t"}},
		{repeat(db, 1), shard.Config{Table: "t; DROP TABLE x"}},
		{repeat(db, 1), shard.Config{Table: ""}},
		{repeat(db, 1), shard.Config{Table: "t", TablesPerDB: -3}},
		{repeat(db, 1), shard.Config{Table: "t", Pattern: "%s_same"}},
	} {
		if _, err := shard.New(c.dbs, c.cfg); !errors.Is(err, shard.ErrConfig) {
			t.Errorf("New(%d dbs, %+v) = %v, want ErrConfig", len(c.dbs), c.cfg, err)
		}
	}
	r, _ := shard.New(repeat(db, 1), shard.Config{Table: "t", TablesPerDB: 2})
	if err := r.CreateTables(context.Background(), "CREATE TABLE t (id INT)"); !errors.Is(err, shard.ErrConfig) {
		t.Errorf("DDL without {{table}}: %v", err)
	}
}

const scoresDDL = `CREATE TABLE IF NOT EXISTS {{table}} (
	user_key VARCHAR(64) NOT NULL PRIMARY KEY,
	score    BIGINT NOT NULL
)`

type row struct {
	Key   string `db:"user_key"`
	Score int64  `db:"score"`
}

// Rows written through the router land in their own table of their own
// database only, on 8 real databases × 8 tables; Gather merges the top N
// across all 64 tables exactly as a sort of everything would.
func TestCreateWriteGather(t *testing.T) {
	ctx := context.Background()
	r, err := shard.New(testenv.NewSQLs(t, 8), shard.Config{Table: "scores", TablesPerDB: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTables(ctx, scoresDDL); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTables(ctx, scoresDDL); err != nil {
		t.Fatalf("DDL must be re-runnable: %v", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var all []row
	for i := range 2000 {
		w := row{Key: "u" + strconv.Itoa(i), Score: rng.Int64N(500)} // many ties
		s := r.ByKey(w.Key)
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO "+s.Table+" (user_key, score) VALUES (?, ?)", w.Key, w.Score); err != nil {
			t.Fatal(err)
		}
		all = append(all, w)
	}
	// Each row is in its routed table and nowhere else.
	for _, w := range all[:50] {
		for _, s := range r.All() {
			var n int
			if err := s.DB.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+s.Table+" WHERE user_key = ?", w.Key); err != nil {
				t.Fatal(err)
			}
			if want := b2i(s.Index == r.ByKey(w.Key).Index); n != want {
				t.Fatalf("%s found %d times in %s", w.Key, n, s.Table)
			}
		}
	}

	better := func(a, b row) bool { return a.Score > b.Score || a.Score == b.Score && a.Key < b.Key }
	const top = 100
	got, err := shard.Gather(ctx, r.All(), 4, func(ctx context.Context, s shard.Shard) ([]row, error) {
		var rows []row
		err := s.DB.SelectContext(ctx, &rows, "SELECT user_key, score FROM "+s.Table+" ORDER BY score DESC, user_key ASC LIMIT ?", top)
		return rows, err
	}, better, top)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(all, func(a, b row) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	if !slices.Equal(got, all[:top]) {
		t.Fatalf("gathered top %d differs from the global sort:\n got %v\nwant %v", top, got[:5], all[:5])
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The first error is returned and cancels the queries still running.
func TestGatherFirstErrorCancelsOthers(t *testing.T) {
	r, _ := shard.New(repeat(testenv.NewSQL(t), 1), shard.Config{Table: "t", TablesPerDB: 16})
	boom := errors.New("shard 5 is down")
	cancelled := make(chan int, 16)
	_, err := shard.Gather(context.Background(), r.All(), 0, func(ctx context.Context, s shard.Shard) ([]int, error) {
		if s.Index == 5 {
			return nil, boom
		}
		<-ctx.Done() // the others would hang without the cancellation
		cancelled <- s.Index
		return nil, ctx.Err()
	}, func(a, b int) bool { return a < b }, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the shard's error", err)
	}
	if len(cancelled) != 15 {
		t.Fatalf("%d of 15 other queries saw the cancellation", len(cancelled))
	}
}

func TestGatherParentCancellation(t *testing.T) {
	r, _ := shard.New(repeat(testenv.NewSQL(t), 1), shard.Config{Table: "t", TablesPerDB: 4})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := shard.Gather(ctx, r.All(), 2, func(ctx context.Context, s shard.Shard) ([]int, error) {
		return nil, ctx.Err()
	}, func(a, b int) bool { return a < b }, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestMergeLimitAndTies(t *testing.T) {
	r, _ := shard.New(repeat(testenv.NewSQL(t), 1), shard.Config{Table: "t", TablesPerDB: 3})
	lists := map[int][]string{0: {"a1", "c1"}, 1: {"a2", "b2"}, 2: {}}
	less := func(a, b string) bool { return a[0] < b[0] } // compares the letter only
	for _, c := range []struct {
		limit int
		want  string
	}{{0, "[a1 a2 b2 c1]"}, {3, "[a1 a2 b2]"}, {10, "[a1 a2 b2 c1]"}} {
		got, err := shard.Gather(context.Background(), r.All(), 1, func(_ context.Context, s shard.Shard) ([]string, error) {
			return lists[s.Index], nil
		}, less, c.limit)
		if err != nil || fmt.Sprint(got) != c.want {
			t.Errorf("limit %d: %v, %v; want %s (ties in shard order)", c.limit, got, err, c.want)
		}
	}
}
