package hotlist_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

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
