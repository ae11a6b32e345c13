package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/kafka"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/outbox"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// flaky sends for real but reports failure on the first `lose` batches, as a
// relay that crashed after the send and before the delete would see it.
type flaky struct {
	p    *kafka.Producer
	mu   sync.Mutex
	lose int
	down int // batches refused outright (Kafka unreachable)
}

func (f *flaky) SendBatch(ms []kafka.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down > 0 {
		f.down--
		return errors.New("kafka: unreachable")
	}
	if err := f.p.SendBatch(ms); err != nil {
		return err
	}
	if f.lose > 0 {
		f.lose--
		return errors.New("ack lost")
	}
	return nil
}

// Entries in several streams (on different cluster slots) all reach Kafka —
// through an outage and a lost acknowledgement — none lost, and the only
// duplicates are the batch whose acknowledgement was lost.
func TestRelayAtLeastOnce(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedisCluster(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 4)
	space := keys.NewSpace(r.Namespace)
	var streams []string
	for b := range 4 {
		streams = append(streams, space.Key(fmt.Sprintf("b%d", b), "outbox"))
	}
	const perStream = 30
	for i := range perStream {
		for _, s := range streams {
			args := &redis.XAddArgs{Stream: s, Values: map[string]any{"user": fmt.Sprintf("u%d", i%7), "n": fmt.Sprintf("%s/%d", s, i)}}
			if err := r.Client.XAdd(ctx, args).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := kafka.NewProducer(brokers, kafka.Config("outbox-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := &flaky{p: p, down: 2, lose: 1}
	relay := outbox.NewRelay(r.Client, streams, topic, "user", send)

	if _, err := relay.Drain(ctx); err == nil {
		t.Fatal("drain with Kafka down reported no error")
	}
	if n, _ := relay.Pending(ctx); n != 4*perStream {
		t.Fatalf("%d pending after a failed pass, want all %d", n, 4*perStream)
	}
	for pass := 0; ; pass++ {
		n, _ := relay.Drain(ctx)
		if pending, _ := relay.Pending(ctx); pending == 0 {
			break
		}
		if pass > 10 {
			t.Fatalf("still pending after %d passes (last moved %d)", pass, n)
		}
	}

	seen := map[string]int{}
	var mu sync.Mutex
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kafka.Consume(cctx, brokers, "outbox-"+topic, []string{topic}, kafka.Config("outbox-consumer"), func(_ context.Context, m *sarama.ConsumerMessage) error {
		var v map[string]string
		if err := json.Unmarshal(m.Value, &v); err != nil || v["user"] != string(m.Key) {
			t.Errorf("message %s / %s", m.Key, m.Value)
		}
		mu.Lock()
		seen[v["n"]]++
		if len(seen) == 4*perStream {
			cancel()
		}
		mu.Unlock()
		return nil
	})
	if len(seen) != 4*perStream {
		t.Fatalf("%d distinct entries reached Kafka, want %d", len(seen), 4*perStream)
	}
}
