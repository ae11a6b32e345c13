package rank_test

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

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/rank"
)

// migrateFixture is a packed board of static members — scores ≥ 1,000,000,
// above every other, never written again, so that their entries, ranks and
// the top are known exactly at every moment — and dynamic ones, which the
// writers own.
type migrateFixture struct {
	r       *testenv.Redis
	cfg     rank.Config // an EncodingAuto Board's configuration, Now unset
	static  []rank.Entry
	initial *model // every member as filled
}

const staticBase = 1_000_000

// fillPacked writes n members into a packed board of shards shards, the
// first nStatic static, the rest dynamic with scores 0..999 (many ties),
// in batches whose writes share a millisecond.
func fillPacked(t testing.TB, r *testenv.Redis, name string, shards, n, nStatic int) *migrateFixture {
	ctx := context.Background()
	clk := testenv.NewClock(epoch.Add(time.Hour))
	cfg := rank.Config{Name: name, Shards: shards, Epoch: epoch}
	packedCfg := cfg
	packedCfg.Encoding, packedCfg.Now = rank.EncodingPacked, clk.Now
	filler := newBoardWith(t, r, packedCfg)
	m := newModel(rank.Descending)
	m.min, m.max = 0, 1<<21-1
	rng := rand.New(rand.NewPCG(7, 8))
	var batch []rank.Update
	flush := func() {
		if _, err := filler.Apply(ctx, batch); err != nil {
			t.Fatal(err)
		}
		tick := clk.Now().Sub(epoch).Milliseconds()
		for _, u := range batch {
			m.apply("set", u.Member, u.Value, tick)
		}
		batch = batch[:0]
		clk.Add(time.Millisecond)
	}
	for i := range n {
		u := rank.Update{Member: fmt.Sprintf("d%d", i), Mode: rank.Replace, Value: rng.Int64N(1000)}
		if i < nStatic {
			u = rank.Update{Member: fmt.Sprintf("s%d", i), Mode: rank.Replace, Value: staticBase + int64(i/3)}
		}
		batch = append(batch, u)
		if len(batch) == 2000 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	f := &migrateFixture{r: r, cfg: cfg, initial: m}
	for _, e := range m.sorted(rank.Ordinal) {
		if e.Score >= staticBase {
			f.static = append(f.static, e)
		}
	}
	return f
}

// board is an EncodingAuto Board of the fixture's board on clock now.
func (f *migrateFixture) board(t testing.TB, now func() time.Time) *rank.Board {
	cfg := f.cfg
	cfg.Now = now
	return newBoardWith(t, f.r, cfg)
}

// writer owns the members d<i> with i % writers == id (d<i> for i below the
// static members' number are new), writes them
// with its own Board and clock (so that it knows each write's time), and
// keeps its own model of them.
type writer struct {
	id, of int
	board  *rank.Board
	clk    *testenv.Clock
	m      *model // of its members, from the filled board on
	rng    *rand.Rand
	writes atomic.Int64
}

func (w *writer) member(n int) string {
	return fmt.Sprintf("d%d", w.rng.IntN(n/w.of)*w.of+w.id)
}

// step makes one write: Add, Set, Best, a batched Apply over several shards,
// or a Remove.
func (w *writer) step(ctx context.Context, dynamic int) error {
	w.clk.Add(time.Duration(w.rng.IntN(2)) * time.Millisecond)
	tick := w.clk.Now().Sub(epoch).Milliseconds()
	defer w.writes.Add(1)
	switch op := w.rng.IntN(10); {
	case op < 3:
		mem, d := w.member(dynamic), 1+w.rng.Int64N(3)
		got, err := w.board.Add(ctx, mem, d)
		w.m.apply("add", mem, d, tick)
		if err == nil && got != w.m.score[mem] {
			err = fmt.Errorf("Add(%s) = %d, model %d", mem, got, w.m.score[mem])
		}
		return err
	case op < 5:
		mem, v := w.member(dynamic), w.rng.Int64N(1000)
		_, err := w.board.Set(ctx, mem, v)
		w.m.apply("set", mem, v, tick)
		return err
	case op < 7:
		mem, v := w.member(dynamic), w.rng.Int64N(1000)
		_, err := w.board.Best(ctx, mem, v)
		w.m.apply("best", mem, v, tick)
		return err
	case op < 9:
		us := make([]rank.Update, 6)
		for i := range us {
			us[i] = rank.Update{Member: w.member(dynamic), Mode: []rank.Mode{rank.Replace, rank.Increment, rank.KeepBest}[i%3], Value: 1 + w.rng.Int64N(900)}
		}
		got, err := w.board.Apply(ctx, us)
		for i, u := range us {
			w.m.apply(map[rank.Mode]string{rank.Replace: "set", rank.Increment: "add", rank.KeepBest: "best"}[u.Mode], u.Member, u.Value, tick)
			if err == nil && u.Mode == rank.Increment && i == len(us)-1 && got[i] != w.m.score[u.Member] {
				err = fmt.Errorf("Apply: %s = %d, model %d", u.Member, got[i], w.m.score[u.Member])
			}
		}
		return err
	default:
		mem := w.member(dynamic)
		w.m.apply("remove", mem, 0, 0)
		return w.board.Remove(ctx, mem)
	}
}

// readStatic checks that reads of the static members — their entries and
// ranks, the top, a window around one — are exact, whatever the writers
// and the migration are doing.
func readStatic(ctx context.Context, b *rank.Board, static []rank.Entry, rng *rand.Rand) error {
	i := rng.IntN(len(static))
	w := static[i]
	switch rng.IntN(4) {
	case 0:
		got, err := b.Rank(ctx, w.Member)
		if err != nil || !same([]rank.Entry{got}, []rank.Entry{w}) {
			return fmt.Errorf("Rank(%s) = %+v, %v; want %+v", w.Member, got, err, w)
		}
	case 1:
		top, err := b.Top(ctx, 20)
		if err != nil || !same(top, static[:20]) {
			return fmt.Errorf("Top(20) = %v, %v; want %v", top, err, static[:20])
		}
	case 2:
		i = 3 + rng.IntN(len(static)-6)
		got, err := b.Around(ctx, static[i].Member, 3)
		if want := static[i-3 : i+4]; err != nil || !same(got, want) {
			return fmt.Errorf("Around(%s, 3) = %v, %v; want %v", static[i].Member, got, err, want)
		}
	default:
		got, err := b.Score(ctx, w.Member)
		if err != nil || got.Score != w.Score || !got.At.Equal(w.At) {
			return fmt.Errorf("Score(%s) = %+v, %v; want %+v", w.Member, got, err, w)
		}
	}
	return nil
}

// TestMigrateUnderLoad migrates a 100,000-member packed board of 8 shards
// to EncodingMember while 6 writers (Add, Set, Best, Apply across shards,
// Remove, each with its own Board and clock) and 3 readers keep going: the
// first Migrate is interrupted (its ctx cancelled after 40 steps), a second
// one, on another Board, resumes it from the stored cursors — converting
// fewer entries than the board holds — and finishes. Throughout, every
// read of the static members is exact (entries, ranks across shards, the
// top, windows); afterwards the whole board, paged, equals the model of
// every write — scores, ranks, times reached and so tie order — its
// records say EncodingMember, the migration's keys are gone, and the
// Boards that wrote and read it packed now write and read it as
// EncodingMember.
func TestMigrateUnderLoad(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		r.NeedsServer(t, "a 100,000-member board under concurrent load")
		ctx := context.Background()
		const n, nStatic, nWriters, nReaders = 100_000, 10_000, 6, 3
		f := fillPacked(t, r, "migrate", 8, n, nStatic)

		writers := make([]*writer, nWriters)
		for i := range writers {
			clk := testenv.NewClock(epoch.Add(2*time.Hour + time.Duration(i)*time.Millisecond/2))
			writers[i] = &writer{id: i, of: nWriters, board: f.board(t, clk.Now), clk: clk, m: newModel(rank.Descending), rng: rand.New(rand.NewPCG(uint64(i), 9))}
			writers[i].m.min, writers[i].m.max = 0, 1<<21-1
		}
		for mem, s := range f.initial.score {
			var k int
			if _, err := fmt.Sscanf(mem, "d%d", &k); err == nil {
				w := writers[k%nWriters]
				w.m.score[mem], w.m.tick[mem] = s, f.initial.tick[mem]
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []error
		fail := func(err error) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, err)
		}
		for _, w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := w.step(ctx, n); err != nil {
						fail(fmt.Errorf("writer %d: %w", w.id, err))
						return
					}
				}
			}()
		}
		var reads atomic.Int64
		for i := range nReaders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := f.board(t, testenv.Now)
				rng := rand.New(rand.NewPCG(uint64(i), 10))
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := readStatic(ctx, b, f.static, rng); err != nil {
						fail(fmt.Errorf("reader %d: %w", i, err))
						return
					}
					reads.Add(1)
				}
			}()
		}
		written := func() (sum int64) {
			for _, w := range writers {
				sum += w.writes.Load()
			}
			return sum
		}
		// waitWrites waits for the writers to make n more writes, or to stop.
		waitWrites := func(n int64) {
			deadline := testenv.Now().Add(time.Minute)
			for to := written() + n; written() < to && testenv.Now().Before(deadline); {
				mu.Lock()
				failed := len(failures) > 0
				mu.Unlock()
				if failed {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
		waitWrites(200) // on the packed board, first

		first, cancel := context.WithCancel(ctx)
		steps, converted := 0, 0
		err := f.board(t, testenv.Now).Migrate(first, rank.MigrateOptions{Step: func(_, c int, _ bool) {
			steps++
			converted += c
			if steps == 40 {
				cancel()
			}
		}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted Migrate: %v, want context.Canceled", err)
		}
		beforeResume, readsBefore := written(), reads.Load()
		resumed := 0
		if err := f.board(t, testenv.Now).Migrate(ctx, rank.MigrateOptions{Chunk: 700, Step: func(_, c int, _ bool) { resumed += c }}); err != nil {
			t.Fatal(err)
		}
		t.Logf("first Migrate converted %d in %d steps, the resumed one %d; %d writes and %d reads during the resumed one",
			converted, steps, resumed, written()-beforeResume, reads.Load()-readsBefore)
		if resumed >= n-converted/2 {
			t.Errorf("the resumed Migrate converted %d entries: it started again rather than at the cursors (%d converted before)", resumed, converted)
		}
		// Writes after the switch, by Boards that wrote packed before it.
		waitWrites(300)
		close(stop)
		wg.Wait()
		for _, err := range failures {
			t.Error(err)
		}
		if t.Failed() {
			return
		}

		// The static members as filled, the others as their writer's
		// model has them.
		want := newModel(rank.Descending)
		for _, e := range f.static {
			want.score[e.Member], want.tick[e.Member] = e.Score, f.initial.tick[e.Member]
		}
		for _, w := range writers {
			for mem, s := range w.m.score {
				want.score[mem], want.tick[mem] = s, w.m.tick[mem]
			}
		}
		b := f.board(t, testenv.Now)
		checkWholeBoard(t, ctx, b, want.sorted(rank.Ordinal))
		for _, key := range b.Keys() {
			tag := strings.TrimSuffix(key, ":rank")
			if got := r.Client.Get(ctx, tag+":encoding").Val(); got != "member order=desc" {
				t.Errorf("%s records %q after Migrate", tag, got)
			}
			if n := r.Client.Exists(ctx, tag+":migrate", tag+":migrate:rank", tag+":migrate:ties").Val(); n != 0 {
				t.Errorf("%s: %d migration keys left", tag, n)
			}
		}
		// The board is EncodingMember now: scores beyond the packed range.
		if _, err := writers[0].board.Set(ctx, "d0", 1<<40); err != nil {
			t.Errorf("a write beyond the packed range after Migrate: %v", err)
		}
	})
}

// checkWholeBoard pages through b and compares every entry with want.
func checkWholeBoard(t *testing.T, ctx context.Context, b *rank.Board, want []rank.Entry) {
	t.Helper()
	var got []rank.Entry
	cursor := ""
	for {
		page, next, err := b.Page(ctx, cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != len(want) {
		t.Fatalf("board has %d entries, model %d", len(got), len(want))
	}
	for i := range want {
		if !same(got[i:i+1], want[i:i+1]) {
			t.Fatalf("entry %d: %+v, model %+v", i+1, got[i], want[i])
		}
	}
	if size, err := b.Size(ctx); err != nil || size != int64(len(want)) {
		t.Fatalf("Size = %d, %v; want %d", size, err, len(want))
	}
}

// TestMigrateCopiesChangesAndFinishesAnInterruptedSwitch stops a Migrate
// once shard 0's copy is complete, then changes every shard while they are
// being copied — Set, Add, Best, Remove, RemoveRangeByScore and
// RemoveRangeByRank on the packed board — and swaps shard 0 by hand, as a
// Migrate stopped between two shards' swaps would leave it: reads and
// writes then wait and get ErrMigrating, and a Board configured
// EncodingPacked is refused. Migrate run again finishes the switch, and the
// board equals the model of every change, in every read.
func TestMigrateCopiesChangesAndFinishesAnInterruptedSwitch(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		r.NeedsServer(t, "the migration's scripts")
		ctx := context.Background()
		f := fillPacked(t, r, "switch", 3, 600, 60)
		clk := testenv.NewClock(epoch.Add(3 * time.Hour))
		b := f.board(t, clk.Now)
		m := f.initial
		stopped, cancel := context.WithCancel(ctx)
		err := b.Migrate(stopped, rank.MigrateOptions{Chunk: 10, Step: func(shard, _ int, complete bool) {
			if shard == 0 && complete {
				cancel()
			}
		}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped Migrate: %v", err)
		}
		tick := func() int64 { return clk.Now().Sub(epoch).Milliseconds() }
		for i := range 60 {
			mem := fmt.Sprintf("d%d", 60+i*7)
			clk.Add(time.Millisecond)
			var err error
			switch i % 3 {
			case 0:
				_, err = b.Set(ctx, mem, int64(i))
				m.apply("set", mem, int64(i), tick())
			case 1:
				_, err = b.Add(ctx, mem, 5)
				m.apply("add", mem, 5, tick())
			default:
				_, err = b.Best(ctx, "new"+mem, 2000)
				m.apply("best", "new"+mem, 2000, tick())
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Remove(ctx, "d100", "d101", "s5"); err != nil {
			t.Fatal(err)
		}
		for _, mem := range []string{"d100", "d101", "s5"} {
			m.apply("remove", mem, 0, 0)
		}
		removed, err := b.RemoveRangeByScore(ctx, 990, 999)
		if err != nil {
			t.Fatal(err)
		}
		for mem, s := range m.score {
			if s >= 990 && s <= 999 {
				m.apply("remove", mem, 0, 0)
				removed--
			}
		}
		if removed != 0 {
			t.Fatalf("RemoveRangeByScore removed %d more than the model", removed)
		}
		sorted := m.sorted(rank.Ordinal)
		if n, err := b.RemoveRangeByRank(ctx, 11, 15); err != nil || n != 5 {
			t.Fatalf("RemoveRangeByRank(11, 15) = %d, %v", n, err)
		}
		for _, e := range sorted[10:15] {
			m.apply("remove", e.Member, 0, 0)
		}

		// Swap shard 0 as migrate_switch.lua does, and stop there.
		tag := strings.TrimSuffix(b.Keys()[0], ":rank")
		pipe := r.Client.TxPipeline()
		pipe.Unlink(ctx, tag+":rank", tag+":ties")
		pipe.Rename(ctx, tag+":migrate:rank", tag+":rank")
		pipe.Rename(ctx, tag+":migrate:ties", tag+":ties")
		pipe.Set(ctx, tag+":encoding", "member order=desc", redis.KeepTTL)
		pipe.Del(ctx, tag+":migrate")
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		onShard0 := ""
		for mem := range m.score {
			if shardOf(b, mem) == 0 {
				onShard0 = mem
				break
			}
		}
		if _, err := f.board(t, clk.Now).Rank(ctx, onShard0); !errors.Is(err, rank.ErrMigrating) {
			t.Fatalf("Rank on a board half switched: %v, want ErrMigrating", err)
		}
		if _, err := b.Add(ctx, onShard0, 1); !errors.Is(err, rank.ErrMigrating) {
			t.Fatalf("Add on a board half switched, by a Board that wrote it packed: %v, want ErrMigrating", err)
		}
		if _, err := b.Top(ctx, 5); !errors.Is(err, rank.ErrMigrating) {
			t.Fatalf("Top on a board half switched, by a Board that read it packed: %v, want ErrMigrating", err)
		}

		if err := f.board(t, clk.Now).Migrate(ctx, rank.MigrateOptions{}); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		checkBoard(t, ctx, b, m.sorted(rank.Ordinal), rng, "after the resumed switch")
		checkBoard(t, ctx, f.board(t, clk.Now), m.sorted(rank.Ordinal), rng, "after the resumed switch, a new Board")
		packedCfg := f.cfg
		packedCfg.Encoding = rank.EncodingPacked
		if _, err := newBoardWith(t, r, packedCfg).Top(ctx, 1); !errors.Is(err, rank.ErrEncodingMismatch) {
			t.Fatalf("an EncodingPacked Board after Migrate: %v", err)
		}
		if err := b.Migrate(ctx, rank.MigrateOptions{}); err != nil {
			t.Fatalf("Migrate of a migrated board: %v", err)
		}
	})
}

// Migrate refuses a Board that cannot run it and a bad chunk, and does
// nothing on a board that is EncodingMember already or empty.
func TestMigrateRefusesAndSkips(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	for _, cfg := range []rank.Config{
		{Name: "no-epoch"},
		{Name: "packed", Epoch: epoch, Encoding: rank.EncodingPacked},
		{Name: "member", Epoch: epoch, Encoding: rank.EncodingMember},
	} {
		if err := newBoardWith(t, r, cfg).Migrate(ctx, rank.MigrateOptions{}); !errors.Is(err, rank.ErrConfig) {
			t.Errorf("Migrate with %+v: %v, want ErrConfig", cfg, err)
		}
	}
	b := newBoardWith(t, r, rank.Config{Name: "auto", Epoch: epoch, Shards: 2, Now: testenv.Now})
	for _, chunk := range []int{-1, 5001} {
		if err := b.Migrate(ctx, rank.MigrateOptions{Chunk: chunk}); !errors.Is(err, rank.ErrInvalid) {
			t.Errorf("Migrate with chunk %d: %v, want ErrInvalid", chunk, err)
		}
	}
	if err := b.Migrate(ctx, rank.MigrateOptions{}); err != nil {
		t.Fatalf("Migrate of an empty board: %v", err)
	}
	if _, err := b.Set(ctx, "a", 1<<40); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, rank.MigrateOptions{}); err != nil {
		t.Fatalf("Migrate of an EncodingMember board: %v", err)
	}
	if e, err := b.Score(ctx, "a"); err != nil || e.Score != 1<<40 {
		t.Fatalf("after a Migrate that had nothing to do: %+v, %v", e, err)
	}
}

// A copy that lacks an entry of its shard — as a scan may miss entries
// across a server restart — is never swapped in: Migrate empties it and
// copies the shard again, and the board comes out whole.
func TestMigrateRescansACopyThatMissedEntries(t *testing.T) {
	r := testenv.NewRedis(t)
	r.NeedsServer(t, "the migration's scripts")
	ctx := context.Background()
	f := fillPacked(t, r, "rescan", 3, 300, 30)
	b := f.board(t, testenv.Now)
	stopped, cancel := context.WithCancel(ctx)
	err := b.Migrate(stopped, rank.MigrateOptions{Chunk: 20, Step: func(shard, _ int, complete bool) {
		if shard == 2 && complete {
			cancel()
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped Migrate: %v", err)
	}
	tag := strings.TrimSuffix(b.Keys()[1], ":rank")
	if n := r.Client.ZPopMin(ctx, tag+":migrate:rank", 1).Val(); len(n) != 1 {
		t.Fatalf("shard 1's copy: %v", n)
	}
	again := map[int]int{}
	if err := b.Migrate(ctx, rank.MigrateOptions{Step: func(shard, n int, _ bool) {
		again[shard] += n
		// No shard is swapped before the rescan ends.
		for _, key := range b.Keys() {
			if got := r.Client.Get(ctx, strings.TrimSuffix(key, ":rank")+":encoding").Val(); got == "member order=desc" {
				t.Errorf("%s swapped during the rescan", key)
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if size := r.Client.ZCard(ctx, b.Keys()[1]).Val(); again[1] != int(size) || again[0] != 0 || again[2] != 0 {
		t.Fatalf("copied again %v; want shard 1 whole (%d entries), the others not at all", again, size)
	}
	checkBoard(t, ctx, b, f.initial.sorted(rank.Ordinal), rand.New(rand.NewPCG(1, 2)), "after a rescan")
}
