package hotlist_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// A claim that makes flush.lua's decisions from its copy of the heat set
// (leaving out what the script would drop, sending the sums it would
// write) leaves Redis exactly as one that sends every increment: after every
// flush both lists hold the same members with bit-identical scores and the
// same meta — through restarts, a resync, a lost reply and the rebuild at a
// landmark, with likes deduplicated or not. A Zipf stream over 3,000 items,
// 150 kept per partition, so that most flushes leave much out.
func TestHeatCopyChangesNothing(t *testing.T) {
	for _, dedup := range []bool{false, true} {
		t.Run("dedup="+strconv.FormatBool(dedup), func(t *testing.T) {
			r, proxy := testenv.NewFaultyRedis(t)
			clk := testenv.NewClock(testenv.Now().Truncate(time.Hour).Add(time.Hour))
			cfg := hotlist.Config{Namespace: r.Namespace, Partitions: 2, Keep: 150, HalfLife: time.Minute,
				RescaleEvery: 2, RescaleChunk: 40, DedupLikes: dedup, Now: clk.Now}
			log := make([][][]byte, cfg.Partitions) // per partition, the messages by offset
			copied := newFeed(t, r, cfg, "copied", false, &log)
			sent := newFeed(t, r, cfg, "sent", true, &log)
			rng := rand.New(rand.NewPCG(21, 22))
			zipf := rand.NewZipf(rng, 1.1, 1, 2999)
			for round := range 24 {
				var events []hotlist.Event
				for range 600 {
					events = append(events, hotlist.Event{Item: "z" + strconv.FormatUint(zipf.Uint64(), 10), Kind: hotlist.Kind(1 + rng.IntN(4)),
						User: "u" + strconv.Itoa(rng.IntN(3)), At: at(clk.Now(), -rng.IntN(10_000))})
				}
				msgs, err := hotlist.EncodeMessages("t", cfg.Partitions, 50, events)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					p := hotlist.PartitionOf(m.Key, cfg.Partitions)
					log[p] = append(log[p], m.Value)
				}
				for _, f := range []*feed{copied, sent} {
					f.read()
					switch round % 8 {
					case 3: // a consumer restarts, dropping what it had not flushed
						f.restart()
					case 5: // another consumer applies first: ErrResync, then a new claim
						f.overtaken(0)
					}
				}
				if round == 9 {
					proxy.DropReplies(1) // the copy's first flush is applied, its reply lost, the call resent
				}
				if round == 14 {
					clk.Add(2 * time.Minute) // a landmark: the next set is built over several flushes
				}
				copied.flush()
				sent.flush()
				if err := sameState(r, cfg, copied, sent); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				clk.Add(time.Second)
			}
			cs, ss := copied.a.Stats(), sent.a.Stats()
			if cs.Unsent*20 < cs.Flushed || ss.Unsent != 0 || cs.Replays == 0 || cs.Resyncs == 0 || ss.Resyncs == 0 {
				t.Fatalf("copied %+v, sent %+v: want 5%% of the entries or more left out by the copy, none by the other, a replay and resyncs", cs, ss)
			}
			if cs.Events != ss.Events {
				t.Fatalf("copied %+v, sent %+v: not the same stream", cs, ss)
			}
		})
	}
}

// feed drives a list from a shared topic log, a claim per partition.
type feed struct {
	t      *testing.T
	l      *hotlist.List
	a      *hotlist.Aggregator
	name   string
	all    bool // send everything
	claims []*hotlist.Claim
	next   []int64 // per partition, the next offset to read
	log    *[][][]byte
}

func newFeed(t *testing.T, r *testenv.Redis, cfg hotlist.Config, name string, all bool, log *[][][]byte) *feed {
	t.Helper()
	cfg.Name = name
	l, err := hotlist.New(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &feed{t: t, l: l, name: name, all: all, log: log, claims: make([]*hotlist.Claim, cfg.Partitions), next: make([]int64, cfg.Partitions)}
	f.a = f.aggregator()
	for p := range f.claims {
		f.claim(f.a, p)
	}
	return f
}

func (f *feed) aggregator() *hotlist.Aggregator {
	a, err := hotlist.NewAggregator(f.l, hotlist.AggregatorConfig{MaxPending: 1_000_000})
	if err != nil {
		f.t.Fatal(err)
	}
	if f.all {
		hotlist.SendEverything(a)
	}
	return a
}

// claim claims p anew and reads the log from its Resume offset.
func (f *feed) claim(a *hotlist.Aggregator, p int) {
	f.t.Helper()
	c, err := a.Claim(context.Background(), int32(p))
	if err != nil {
		f.t.Fatal(err)
	}
	f.claims[p], f.next[p] = c, c.Resume()
	f.readPartition(p)
}

func (f *feed) read() {
	for p := range f.claims {
		f.readPartition(p)
	}
}

func (f *feed) readPartition(p int) {
	f.t.Helper()
	for ; f.next[p] < int64(len((*f.log)[p])); f.next[p]++ {
		if err := f.claims[p].Add(f.next[p], (*f.log)[p][f.next[p]]); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *feed) restart() {
	for p, c := range f.claims {
		c.Close()
		f.claim(f.a, p)
	}
}

// overtaken has another consumer claim p, read all but its last message
// and flush, so that p's claim, which holds that message too, is fenced at
// its next flush.
func (f *feed) overtaken(p int) {
	f.t.Helper()
	other, err := f.aggregator().Claim(context.Background(), int32(p))
	if err != nil {
		f.t.Fatal(err)
	}
	for off := other.Resume(); off < int64(len((*f.log)[p]))-1; off++ {
		if err := other.Add(off, (*f.log)[p][off]); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := other.Release(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// flush flushes every claim until it holds nothing; a claim fenced by
// another consumer (ErrResync) is replaced by a new one, which reads on
// from the stored offset.
func (f *feed) flush() {
	f.t.Helper()
	for p := range f.claims {
		for {
			err := f.claims[p].Flush(context.Background())
			if errors.Is(err, hotlist.ErrResync) {
				f.claim(f.a, p)
				continue
			}
			if err != nil {
				f.t.Fatalf("%s: %v", f.name, err)
			}
			if f.claims[p].Resume() == int64(len((*f.log)[p])) {
				break
			}
		}
	}
}

// sameState compares the two lists' keys of every partition: heat sets
// (members and scores, exactly) and meta.
func sameState(r *testenv.Redis, cfg hotlist.Config, a, b *feed) error {
	ctx := context.Background()
	for p := range cfg.Partitions {
		key := func(f *feed, suffix string) string {
			return r.Namespace + ":{" + f.name + ":" + strconv.Itoa(p) + "}:" + suffix
		}
		for _, h := range []string{"heat:0", "heat:1"} {
			x, err1 := r.Client.ZRangeWithScores(ctx, key(a, h), 0, -1).Result()
			y, err2 := r.Client.ZRangeWithScores(ctx, key(b, h), 0, -1).Result()
			if err := errors.Join(err1, err2); err != nil {
				return err
			}
			if !reflect.DeepEqual(x, y) {
				return fmt.Errorf("partition %d, %s: %d members, %d sending everything\n%v\n%v", p, h, len(x), len(y), x, y)
			}
		}
		x, err1 := r.Client.HGetAll(ctx, key(a, "meta")).Result()
		y, err2 := r.Client.HGetAll(ctx, key(b, "meta")).Result()
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if !reflect.DeepEqual(x, y) {
			return fmt.Errorf("partition %d, meta %v, %v sending everything", p, x, y)
		}
	}
	return nil
}

// A claim flushes a large batch made from its copy of the heat set with a
// WATCH transaction of Redis' own commands rather than the script, and
// Redis ends exactly as with every increment sent through the script: a new
// partition started, a copy loaded in the transaction's read (a restart, a
// doubt), a landmark passed (the script builds the next set, then the
// transaction resumes), the EXEC's reply lost (the script then finds the
// offsets applied: a replay), a write between the transaction's read and
// its EXEC (aborted; the script applies), another consumer applying past
// the claim (fenced: ErrResync, then a new claim).
func TestNativeFlushFaults(t *testing.T) {
	ctx := context.Background()
	r, proxy := testenv.NewFaultyRedis(t)
	clk := testenv.NewClock(testenv.Now().Truncate(time.Hour).Add(time.Hour))
	cfg := hotlist.Config{Namespace: r.Namespace, Partitions: 1, Keep: 150, HalfLife: time.Minute, RescaleEvery: 2, RescaleChunk: 40, Now: clk.Now}
	log := make([][][]byte, 1)
	copied := newFeed(t, r, cfg, "copied", false, &log)
	sent := newFeed(t, r, cfg, "sent", true, &log)
	// Between the transaction's read and its EXEC, rewrite the stored
	// offset as it is: the content is unchanged, the WATCH is broken.
	var interfere atomic.Bool
	var refuse atomic.Int32 // WATCHes to refuse, as a proxy or an ACL without it would
	meta := r.Namespace + ":{copied:0}:meta"
	r.Client.AddHook(interference{armed: &interfere, refuse: &refuse, write: func() error {
		off, err := r.Client.HGet(ctx, meta, "offset").Result()
		if err == nil {
			err = r.Client.HSet(ctx, meta, "offset", off).Err()
		}
		return err
	}})
	rng := rand.New(rand.NewPCG(31, 32))
	zipf := rand.NewZipf(rng, 1.1, 1, 2999)
	// step feeds both lists 600 events, arms a fault, flushes both, compares
	// them and returns the copied claim's stats before and after, and how
	// many of its flushes were transactions.
	step := func(name string, arm func()) (before, after hotlist.Stats, natives int64) {
		t.Helper()
		var events []hotlist.Event
		for range 600 {
			events = append(events, hotlist.Event{Item: "z" + strconv.FormatUint(zipf.Uint64(), 10), Kind: hotlist.Kind(1 + rng.IntN(4)),
				At: at(clk.Now(), -rng.IntN(10_000))})
		}
		msgs, err := hotlist.EncodeMessages("t", 1, 50, events)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			log[0] = append(log[0], m.Value)
		}
		before, natives = copied.a.Stats(), hotlist.NativeFlushes(copied.a)
		copied.read()
		sent.read()
		arm()
		copied.flush()
		sent.flush()
		if err := sameState(r, cfg, copied, sent); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		clk.Add(time.Second)
		return before, copied.a.Stats(), hotlist.NativeFlushes(copied.a) - natives
	}
	none := func() {}
	native := func(name string, arm func()) {
		t.Helper()
		if b, a, n := step(name, arm); n != 1 || a.Flushes != b.Flushes+1 || !hotlist.HoldsCopy(copied.claims[0]) {
			t.Fatalf("%s: %d transactions, stats %+v after %+v, copy held %v; want one applied transaction, its reply agreeing with the copy",
				name, n, a, b, hotlist.HoldsCopy(copied.claims[0]))
		}
	}
	native("a new partition's first flush", none)
	for round := range 3 {
		native("a flush from the copy "+strconv.Itoa(round), none)
	}
	if st := copied.a.Stats(); st.Unsent == 0 {
		t.Fatalf("stats %+v: the copy left nothing out", st)
	}
	native("a restarted claim's first flush, loading the copy", func() { copied.restart(); sent.restart() })

	cuts := proxy.Cuts()
	if b, a, n := step("its EXEC's reply lost", func() { proxy.DropReplyTo("$4\r\nexec\r\n", 1) }); n != 0 || a.Replays != b.Replays+1 || proxy.Cuts() != cuts+1 {
		t.Fatalf("EXEC's reply lost: %d transactions, stats %+v after %+v, %d replies cut; want a replay", n, a, b, proxy.Cuts()-cuts)
	}
	native("after the replay, loading the copy", none)

	if b, a, n := step("a write between read and EXEC", func() { interfere.Store(true) }); n != 0 || a.Flushes != b.Flushes+1 || interfere.Load() {
		t.Fatalf("write between read and EXEC: %d transactions, stats %+v after %+v; want the script to apply", n, a, b)
	}
	native("after the abort", none)

	// A landmark: the script builds the next set over several flushes. The
	// claims restart first, so that the copied one, holding no copy, learns
	// of the landmark only from Redis.
	clk.Add(2 * time.Minute)
	for round := 0; ; round++ {
		arm := none
		if round == 0 {
			arm = func() { copied.restart(); sent.restart() }
		}
		if _, _, n := step("after a landmark "+strconv.Itoa(round), arm); n == 1 {
			if round == 0 {
				t.Fatal("a transaction flushed across a landmark")
			}
			break
		}
		if round == 10 {
			t.Fatal("no transaction 10 flushes after a landmark")
		}
	}

	// A zombie claim of the partition, at the same offset, passes the next
	// landmark by flushes that store no offset: it starts the build, or
	// does the whole move. The claim, holding a batch scaled to the
	// landmark before, must leave it to the script, which writes it into
	// both sets, or scales it to the new one.
	zombie := func(f *feed, wholeMove bool) {
		t.Helper()
		z, err := f.aggregator().Claim(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		for range 100 {
			if err := z.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			mig := r.Client.HGet(ctx, r.Namespace+":{"+f.name+":0}:meta", "mig").Val()
			if mig != "" && !wholeMove || mig == "" && wholeMove {
				return
			}
		}
		t.Fatal("the zombie's landmark move did not end")
	}
	for _, wholeMove := range []bool{false, true} {
		name := "a zombie started the next landmark's build"
		if wholeMove {
			name = "a zombie moved the partition to the next landmark"
		}
		if _, _, n := step(name, func() {
			clk.Add(2 * time.Minute)
			zombie(copied, wholeMove)
			zombie(sent, wholeMove)
		}); n != 0 {
			t.Fatalf("%s: a transaction flushed the batch", name)
		}
		for round := 0; ; round++ {
			if _, _, n := step(name+", then "+strconv.Itoa(round), none); n == 1 {
				break
			}
			if round == 10 {
				t.Fatalf("%s: no transaction 10 flushes later", name)
			}
		}
	}

	// Redis refuses the WATCH: the script flushes; three refusals in a row
	// and the claim stops trying until a new claim.
	refused := func(name string) {
		t.Helper()
		if b, a, n := step(name, func() { refuse.Store(1) }); n != 0 || a.Fallbacks != b.Fallbacks+1 || a.Flushes != b.Flushes+1 || refuse.Load() != 0 {
			t.Fatalf("%s: %d transactions, stats %+v after %+v; want one refused, the script flushing", name, n, a, b)
		}
	}
	refused("WATCH refused")
	native("after one refusal", none)
	for round := range maxRefusals {
		refused("WATCH refused, " + strconv.Itoa(round+1) + " in a row")
	}
	if b, a, n := step("after 3 refusals in a row", none); n != 0 || a.Fallbacks != b.Fallbacks {
		t.Fatalf("after 3 refusals: %d transactions, stats %+v after %+v; want none tried", n, a, b)
	}
	native("a new claim after the refusals", func() { copied.restart(); sent.restart() })

	// A failover to a replica that missed the last transaction: heat and
	// offset roll back together (a MULTI replicates as one), the claim's
	// next flush is fenced (ErrResync) and a new claim reads again from the
	// stored offset.
	native("before the failover", none)
	replica := append(dumpKeys(t, r, r.Namespace+":{copied:0}*"), dumpKeys(t, r, r.Namespace+":{sent:0}*")...)
	native("lost in the failover", none)
	restoreKeys(t, r, replica) // both lists' keys: it deletes the namespace's others
	if b, a, _ := step("after the failover", none); a.Resyncs != b.Resyncs+1 || a.Fallbacks != b.Fallbacks+1 {
		t.Fatalf("after the failover: stats %+v after %+v; want the transaction refused and a resync", a, b)
	}

	if b, a, _ := step("another consumer applied past it", func() { copied.overtaken(0); sent.overtaken(0) }); a.Resyncs != b.Resyncs+1 {
		t.Fatalf("overtaken: stats %+v after %+v; want a resync", a, b)
	}
	native("the next claim", none)
}

// maxRefusals is nativeflush.go's: the refused transactions in a row after
// which a claim stops trying them.
const maxRefusals = 3

// interference runs write once, when armed, after a transaction's first
// pipeline (the WATCHed read) and before its MULTI; and answers the next
// refuse WATCHes with an error reply, without sending them.
type interference struct {
	armed  *atomic.Bool
	refuse *atomic.Int32
	write  func() error
}

// refusal is an error reply from Redis (go-redis' redis.Error).
type refusal string

func (e refusal) Error() string { return string(e) }
func (refusal) RedisError()     {}

func (interference) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h interference) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for n := h.refuse.Load(); cmd.Name() == "watch" && n > 0; n = h.refuse.Load() {
			if h.refuse.CompareAndSwap(n, n-1) {
				err := refusal("NOPERM User default has no permissions to run the 'watch' command")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (h interference) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Name() == "hmget" && h.armed.CompareAndSwap(true, false) {
			if werr := h.write(); werr != nil {
				return werr
			}
		}
		return err
	}
}
