package hotkafka_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/hotlist/hotkafka"
	"github.com/casebook-dev/casebook/internal/redisinfo"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
)

// BenchmarkIngest: events per second end to end — consumed from Kafka
// (kfake, the real protocol, through sarama) by one hotkafka consumer,
// aggregated per partition and flushed into Redis (flush every 200 ms) —
// until Redis holds the last offset of every partition. 2M events,
// Zipf-distributed over 5M items, 1000 per message, 8 partitions,
// pre-produced. The baseline in the same run, raw-consume, reads the same
// messages through a sarama consumer group into a handler that does
// nothing: what Kafka and sarama alone allow here.
func BenchmarkIngest(b *testing.B) {
	const parts, events, perMessage = 8, 2_000_000, 1000
	brokers := testenv.Kafka(b)
	topic := testenv.Topic(b, parts)
	r := testenv.NewRedis(b)
	pub, err := kafka.Dial(brokers, "ingest-producer")
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, 5_000_000-1)
	now := testenv.Now()
	var msgs int64
	start := testenv.Now()
	for sent := 0; sent < events; sent += 100_000 {
		batch := make([]hotlist.Event, 100_000)
		for i := range batch {
			batch[i] = hotlist.Event{Item: "item:" + strconv.FormatUint(zipf.Uint64(), 10), Kind: hotlist.Kind(1 + rng.IntN(4)), At: now.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond)}
		}
		out, err := hotlist.EncodeMessages(topic, parts, perMessage, batch)
		if err != nil {
			b.Fatal(err)
		}
		if err := pub.Publish(context.Background(), out); err != nil {
			b.Fatal(err)
		}
		msgs += int64(len(out))
	}
	b.Logf("produced %d events in %d messages in %v", events, msgs, testenv.Since(start).Round(time.Millisecond))

	run := 0
	b.Run("raw-consume", func(b *testing.B) {
		for b.Loop() {
			run++
			group := "raw-" + strconv.Itoa(run) + "-" + topic
			if _, err := kafka.ConsumeN(context.Background(), brokers, group, []string{topic}, msgs,
				func(context.Context, []byte, []byte) error { return nil }, kafka.ConsumerConfig{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("hotlist", func(b *testing.B) {
		cpu := serverCPU(b, r)
		var flushed, unsent int64
		for b.Loop() {
			run++
			name := "ingest-" + strconv.Itoa(run)
			l, err := hotlist.New(r.Client, hotlist.Config{Name: name, Namespace: r.Namespace, Partitions: parts})
			if err != nil {
				b.Fatal(err)
			}
			st := ingest(b, l, brokers, topic, name+"-"+topic)
			flushed, unsent = flushed+st.Flushed, unsent+st.Unsent
		}
		elapsed := b.Elapsed().Seconds()
		b.ReportMetric(float64(b.N*events)/elapsed, "events/s")
		b.ReportMetric(float64(flushed)/elapsed, "items/s")
		// The share of those items the claims left out of the script calls
		// (the script would have read them only to drop them).
		b.ReportMetric(float64(unsent)/float64(max(flushed, 1)), "unsent")
		// The share of the time Redis' main thread was on a CPU (the
		// flushes, by script or transaction, and the claims' reads): near 1
		// means that thread is what limits ingestion. Per event, the same
		// time is steadier than a rate on a machine shared with others.
		used := (serverCPU(b, r) - cpu).Seconds()
		b.ReportMetric(used/elapsed, "redis-busy")
		b.ReportMetric(used*1e9/float64(b.N*events), "redis-ns/event")
	})
}

// serverCPU is the CPU time of Redis' main thread so far, from INFO cpu
// (server-wide: on a shared server, other clients count). Not commandstats:
// it counts a command run by a script or in a MULTI both on its own and
// within EVALSHA's or EXEC's time.
func serverCPU(b *testing.B, r *testenv.Redis) time.Duration {
	b.Helper()
	info, err := r.Client.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	used, err := redisinfo.MainThreadCPU(info)
	if err != nil {
		b.Fatal(err)
	}
	return used
}

// ingest runs one consumer until Redis holds every partition's last offset
// and returns its aggregator's counts.
func ingest(b *testing.B, l *hotlist.List, brokers []string, topic, group string) hotlist.Stats {
	b.Helper()
	client, err := sarama.NewClient(brokers, kafka.Config("offsets"))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	last := make([]int64, l.Partitions())
	for p := range last {
		next, err := client.GetOffset(topic, int32(p), sarama.OffsetNewest)
		if err != nil {
			b.Fatal(err)
		}
		last[p] = next - 1
	}
	g, err := sarama.NewConsumerGroup(brokers, group, kafka.Config(group))
	if err != nil {
		b.Fatal(err)
	}
	agg, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{FlushEvery: 200 * time.Millisecond})
	c, _ := hotkafka.New(g, topic, agg, hotkafka.Config{OnError: func(err error) { b.Error(err) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); g.Close(); close(done) }()
	defer func() { cancel(); <-done }()
	probe, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
	for p := range last {
		for {
			claim, err := probe.Claim(context.Background(), int32(p))
			if err != nil {
				b.Fatal(err)
			}
			if claim.Applied() == last[p] {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	st := agg.Stats()
	if st.Rejected+st.Malformed > 0 {
		b.Fatalf("stats %+v", st)
	}
	return st
}
