package hotkafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/hotlist/hotkafka"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const partitions = 4

// weights whose sums are exact, so per-item totals compare with ==.
var weights = map[hotlist.Kind]float64{hotlist.View: 0.25, hotlist.Like: 0.5, hotlist.Repost: 1, hotlist.Comment: 13.5}

type stream struct {
	t       *testing.T
	brokers []string
	topic   string
	pub     *kafka.Publisher
	rng     *rand.Rand
	want    map[string]float64 // the model: each item's total
	msgs    int
}

// produce publishes n random events (Zipf over 300 items) in batches of up
// to 20 per message and adds them to the model.
func (s *stream) produce(n int) {
	s.t.Helper()
	zipf := rand.NewZipf(s.rng, 1.2, 1, 299)
	events := make([]hotlist.Event, n)
	for i := range events {
		events[i] = hotlist.Event{Item: "i" + strconv.FormatUint(zipf.Uint64(), 10), Kind: hotlist.Kind(1 + s.rng.IntN(4)), At: testenv.Now()}
		s.want[events[i].Item] += weights[events[i].Kind]
	}
	msgs, err := hotlist.EncodeMessages(s.topic, partitions, 20, events)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.pub.Publish(context.Background(), msgs); err != nil {
		s.t.Fatal(err)
	}
	s.msgs += len(msgs)
}

// newWindowStream returns a Window list (exact sums) named name on r and a
// stream into a new topic of its partitions, its producer closed at
// cleanup; seed seeds the stream's events.
func newWindowStream(t *testing.T, r *testenv.Redis, name string, seed uint64) (*hotlist.List, *stream) {
	t.Helper()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, partitions)
	l, err := hotlist.New(r.Client, hotlist.Config{Name: name, Namespace: r.Namespace, Partitions: partitions, Model: hotlist.Window, Weights: weights, Now: testenv.Now})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.Dial(brokers, "producer-"+topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return l, &stream{t: t, brokers: brokers, topic: topic, pub: pub, rng: rand.New(rand.NewPCG(seed, seed+1)), want: map[string]float64{}}
}

// member is one consumer process of a group: its own aggregator and sarama
// group.
type member struct {
	agg    *hotlist.Aggregator
	c      *hotkafka.Consumer
	logs   *obstest.Logs
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, l *hotlist.List, brokers []string, group, topic string, autoCommit bool) *member {
	t.Helper()
	return startWith(t, l, brokers, group, topic, autoCommit, hotlist.AggregatorConfig{FlushEvery: 50 * time.Millisecond})
}

func startWith(t *testing.T, l *hotlist.List, brokers []string, group, topic string, autoCommit bool, aggCfg hotlist.AggregatorConfig) *member {
	t.Helper()
	cfg := kafka.Config(group)
	cfg.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	cfg.Consumer.Offsets.AutoCommit.Enable = autoCommit
	g, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := hotlist.NewAggregator(l, aggCfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := obstest.NewLogs()
	c, err := hotkafka.New(g, topic, agg, hotkafka.Config{Logger: logs.Logger,
		OnReject: func(p int32, off int64, err error) { t.Errorf("partition %d offset %d rejected: %v", p, off, err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{agg: agg, c: c, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		c.Run(ctx)
		g.Close()
	}()
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	m.cancel()
	<-m.done
}

// caughtUp waits until every partition's offset applied in Redis is the
// topic's last.
func caughtUp(t *testing.T, l *hotlist.List, brokers []string, topic string) {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafka.Config("offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	agg, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
	deadline := testenv.Now().Add(time.Minute)
	for p := range int32(partitions) {
		next, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		for {
			c, err := agg.Claim(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if c.Applied() == next-1 {
				break
			}
			if testenv.Now().After(deadline) {
				t.Fatalf("partition %d: applied %d, last offset %d", p, c.Applied(), next-1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func checkTotals(t *testing.T, l *hotlist.List, want map[string]float64, when string) {
	t.Helper()
	top, err := l.Top(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, e := range top {
		got[e.Item] = e.Heat
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d items, model has %d", when, len(got), len(want))
	}
	for item, w := range want {
		if got[item] != w {
			t.Fatalf("%s: %s totals %v, model %v", when, item, got[item], w)
		}
	}
}

// Exactly-once into Redis, end to end through Kafka: a consumer whose
// flushes reached Redis but whose offset commits never reached Kafka (killed
// between the two), a rebalance mid-stream (a member joins, another leaves),
// a replay of the whole topic, and a Redis that lost a partition's writes —
// after each, every item's total equals the model's to the last event.
func TestExactlyOnceThroughKafka(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		l, s := newWindowStream(t, r, "hot", 1)
		brokers, topic, group := s.brokers, s.topic, "g-"+s.topic

		s.produce(1000)
		a := start(t, l, brokers, group, topic, true)
		caughtUp(t, l, brokers, topic)
		a.stop() // leaves the group, committing its offsets
		checkTotals(t, l, s.want, "first member")

		// Killed between flush and commit: its flushes land, its commits
		// never do. It runs in a group of its own, so that nothing it commits
		// (sarama flushes marked offsets when a session ends) can reach the
		// group b and c resume from.
		s.produce(1000)
		k := start(t, l, brokers, group+"-killed", topic, false)
		caughtUp(t, l, brokers, topic)
		k.stop()
		checkTotals(t, l, s.want, "member that never committed")

		// Rebalances mid-stream: b reads what k never committed (skipping
		// it), c joins while events flow, b leaves.
		b := start(t, l, brokers, group, topic, true)
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 10 {
				s.produce(200)
				time.Sleep(30 * time.Millisecond)
			}
		})
		time.Sleep(150 * time.Millisecond)
		c := start(t, l, brokers, group, topic, true)
		time.Sleep(300 * time.Millisecond)
		b.stop()
		wg.Wait()
		caughtUp(t, l, brokers, topic)
		checkTotals(t, l, s.want, "after rebalances")
		if skipped := b.agg.Stats().Duplicates + c.agg.Stats().Duplicates; skipped == 0 {
			t.Fatal("no member re-read what the killed one had applied: the kill was not between flush and commit")
		}

		// A replay of the whole topic through a fresh claim per partition
		// changes nothing.
		replay(t, l, brokers, topic, s.msgs)
		checkTotals(t, l, s.want, "after a replay")

		// Redis loses partition 2 (a failover to an empty replica): its
		// Kafka offset is now past Redis', so c's claim gets ErrResync on its
		// next flush, or the next session moves the offset back; either way
		// the partition is read again from its start.
		c.stop()
		if err := testenv.DeleteKeys(ctx, r.Client, r.Namespace+":{hot:2}*"); err != nil {
			t.Fatal(err)
		}
		d := start(t, l, brokers, group, topic, true)
		s.produce(100)
		caughtUp(t, l, brokers, topic)
		checkTotals(t, l, s.want, "after Redis lost a partition")
		if d.c.Restarts() == 0 {
			t.Fatal("the consumer did not move back to Redis' offset")
		}
		// Every restart was logged, for partition 2, and nothing else was
		// worth a Warn.
		d.stop()
		restarts := 0
		for _, line := range d.logs.Lines() {
			switch {
			case strings.HasPrefix(line, "INFO hotkafka: partition restarts where Redis has applied up to casebook.block=hotlist topic="+topic+" partition=2 "),
				strings.HasPrefix(line, "WARN hotkafka: partition resyncs from its Redis offset casebook.block=hotlist topic="+topic+" partition=2 "):
				restarts++
			case strings.HasPrefix(line, "WARN"), strings.HasPrefix(line, "ERROR"):
				t.Errorf("logged %q", line)
			}
		}
		if restarts != int(d.c.Restarts()) {
			t.Fatalf("%d restarts, %d logged: %q", d.c.Restarts(), restarts, d.logs.Lines())
		}
	})
}

// A backlog read to the high-water mark reaches Redis at once, with
// FlushEvery an hour away and MaxPending out of reach, and in one flush per
// partition (the consumer flushes early only once it has caught up).
func TestDrainedBacklogFlushedAtOnce(t *testing.T) {
	l, s := newWindowStream(t, testenv.NewRedis(t), "drain", 3)
	for range 10 {
		s.produce(400)
	}
	m := startWith(t, l, s.brokers, "g-"+s.topic, s.topic, true,
		hotlist.AggregatorConfig{FlushEvery: time.Hour, CaughtUpFlush: 10 * time.Millisecond, MaxPending: 1_000_000})
	caughtUp(t, l, s.brokers, s.topic)
	checkTotals(t, l, s.want, "drained")
	if st := m.agg.Stats(); st.Flushes > partitions || st.Events != 4000 {
		t.Fatalf("stats %+v: want 4000 events in at most one flush per partition (%d messages)", st, s.msgs)
	}
}

// replay feeds every message of the topic, from the oldest, to new claims
// and flushes: all of it must be found applied already.
func replay(t *testing.T, l *hotlist.List, brokers []string, topic string, msgs int) {
	t.Helper()
	consumer, err := sarama.NewConsumer(brokers, kafka.Config("replay"))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	agg, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
	seen := 0
	for p := range int32(partitions) {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		claim, err := agg.Claim(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for claim.Applied() >= 0 {
			m := <-pc.Messages()
			claim.Add(m.Offset, m.Value)
			seen++
			if m.Offset == claim.Applied() {
				break
			}
		}
		pc.Close()
		if err := claim.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if st := agg.Stats(); seen != msgs || st.Duplicates != int64(msgs) || st.Events != 0 {
		t.Fatalf("replayed %d of %d messages: %+v", seen, msgs, st)
	}
}

// Poison in the topic is reported and skipped; the partition goes on.
func TestMalformedMessagesDoNotBlockThePartition(t *testing.T) {
	r := testenv.NewRedis(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 1)
	l, err := hotlist.New(r.Client, hotlist.Config{Name: "hot", Namespace: r.Namespace, Partitions: 1, Model: hotlist.Window, Weights: weights, Now: testenv.Now})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kafka.Dial(brokers, "producer-"+topic)
	defer pub.Close()
	good, _ := hotlist.EncodeMessages(topic, 1, 0, []hotlist.Event{{Item: "a", Kind: hotlist.Comment, At: testenv.Now()}})
	bad := good[0]
	bad.Value = []byte("not a batch")
	pub.Publish(context.Background(), slices.Concat(good, []outbox.Message{bad}, good))
	g, _ := sarama.NewConsumerGroup(brokers, "g-"+topic, kafka.Config("g-"+topic))
	agg, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{FlushEvery: 20 * time.Millisecond})
	var mu sync.Mutex
	var rejected []string
	logs := obstest.NewLogs()
	c, _ := hotkafka.New(g, topic, agg, hotkafka.Config{Logger: logs.Logger, OnReject: func(p int32, off int64, err error) {
		mu.Lock()
		rejected = append(rejected, fmt.Sprint(p, "/", off, ": ", err))
		mu.Unlock()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); g.Close(); close(done) }()
	caughtUpOne(t, l, 2)
	cancel()
	<-done
	checkTotals(t, l, map[string]float64{"a": 27}, "around a malformed message")
	if len(rejected) != 1 || agg.Stats().Malformed != 1 {
		t.Fatalf("rejected %v, stats %+v", rejected, agg.Stats())
	}
	if lines := logs.Lines(); len(lines) != 1 || !strings.HasPrefix(lines[0], "WARN hotkafka: message rejected casebook.block=hotlist topic="+topic+" partition=0 offset=1 err=") {
		t.Fatalf("logged %q, want the one rejection", lines)
	}
}

func caughtUpOne(t *testing.T, l *hotlist.List, last int64) {
	t.Helper()
	agg, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
	deadline := testenv.Now().Add(time.Minute)
	for {
		c, err := agg.Claim(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if c.Applied() == last {
			return
		}
		if testenv.Now().After(deadline) {
			t.Fatalf("applied %d, want %d", c.Applied(), last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A consumer flushes early once caught up: when its last message is at the
// high-water mark, or when no message came for a CaughtUpFlush while the
// mark stays ahead (a transaction marker or a compacted record at the end
// of the partition is never delivered). FlushEvery is an hour away and
// MaxPending out of reach, so only the caught-up rule can flush. The
// session and claim are sarama's interfaces, driven by the test: at the
// mark, messages come back to back for 300 ms, never a quiet tick apart,
// and several flushes happen meanwhile; with the mark ahead, three come
// and then none, and the silence flushes them.
func TestCaughtUpByMarkOrQuiet(t *testing.T) {
	for _, atMark := range []bool{true, false} {
		t.Run("at the mark="+strconv.FormatBool(atMark), func(t *testing.T) {
			r := testenv.NewRedis(t)
			l, err := hotlist.New(r.Client, hotlist.Config{Name: "quiet", Namespace: r.Namespace, Partitions: 1, Model: hotlist.Window, Weights: weights, Now: testenv.Now})
			if err != nil {
				t.Fatal(err)
			}
			agg, err := hotlist.NewAggregator(l, hotlist.AggregatorConfig{FlushEvery: time.Hour, CaughtUpFlush: 20 * time.Millisecond, MaxPending: 1_000_000})
			if err != nil {
				t.Fatal(err)
			}
			c, err := hotkafka.New(noGroup{}, "t", agg, hotkafka.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			claim := &fakeClaim{msgs: make(chan *sarama.ConsumerMessage)}
			done := make(chan error, 1)
			go func() { done <- c.ConsumeClaim(fakeSession{ctx: ctx}, claim) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			value, err := hotlist.AppendBatch(nil, []hotlist.Event{{Item: "a", Kind: hotlist.Repost, At: testenv.Now()}})
			if err != nil {
				t.Fatal(err)
			}
			var sent int64
			send := func() {
				ahead := int64(3)
				if atMark {
					ahead = 0
				}
				claim.hwm.Store(sent + 1 + ahead)
				claim.msgs <- &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: sent, Value: value}
				sent++
			}
			if atMark {
				for end := testenv.Now().Add(300 * time.Millisecond); testenv.Now().Before(end); {
					send()
				}
				if st := agg.Stats(); st.Flushes < 2 {
					t.Fatalf("stats %+v: %d messages at the mark over 300 ms, want a flush every 20 ms or so", st, sent)
				}
			} else {
				for range 3 {
					send()
				}
			}
			deadline := testenv.Now().Add(10 * time.Second)
			for {
				top, err := l.Top(context.Background(), 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(top) == 1 && top[0].Heat == float64(sent) {
					break
				}
				if testenv.Now().After(deadline) {
					t.Fatalf("top %+v, stats %+v: %d messages not flushed 10 s after the last", top, agg.Stats(), sent)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// noGroup stands for the group a Consumer is made with; ConsumeClaim never
// calls it.
type noGroup struct{ sarama.ConsumerGroup }

type fakeSession struct{ ctx context.Context }

func (fakeSession) Claims() map[string][]int32                  { return nil }
func (fakeSession) MemberID() string                            { return "m" }
func (fakeSession) GenerationID() int32                         { return 1 }
func (fakeSession) MarkOffset(string, int32, int64, string)     {}
func (fakeSession) Commit()                                     {}
func (fakeSession) ResetOffset(string, int32, int64, string)    {}
func (fakeSession) MarkMessage(*sarama.ConsumerMessage, string) {}
func (s fakeSession) Context() context.Context                  { return s.ctx }

type fakeClaim struct {
	msgs chan *sarama.ConsumerMessage
	hwm  atomic.Int64
}

func (*fakeClaim) Topic() string                              { return "t" }
func (*fakeClaim) Partition() int32                           { return 0 }
func (*fakeClaim) InitialOffset() int64                       { return 0 }
func (c *fakeClaim) HighWaterMarkOffset() int64               { return c.hwm.Load() }
func (c *fakeClaim) Messages() <-chan *sarama.ConsumerMessage { return c.msgs }
