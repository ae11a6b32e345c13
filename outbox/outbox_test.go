package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// flaky sends for real but reports failure on the first `lose` batches, as a
// relay that crashed after the send and before the delete would see it.
type flaky struct {
	p    outbox.Publisher
	mu   sync.Mutex
	lose int
	down int // batches refused outright (Kafka unreachable)
	sent int // messages the broker took, duplicates included
}

func (f *flaky) Publish(ctx context.Context, ms []outbox.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down > 0 {
		f.down--
		return errors.New("kafka: unreachable")
	}
	if err := f.p.Publish(ctx, ms); err != nil {
		return err
	}
	f.sent += len(ms)
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
			args := &redis.XAddArgs{Stream: s, Values: map[string]any{outbox.FieldKey: fmt.Sprintf("u%d", i%7), outbox.FieldValue: fmt.Sprintf("u%d %s/%d", i%7, s, i)}}
			if err := r.Client.XAdd(ctx, args).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := kafka.Dial(brokers, "outbox-test")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := &flaky{p: p, down: 2, lose: 1}
	relay := outbox.NewRelay(r.Client, streams, topic, send)

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
	// Read everything the broker took: the re-sent batch's duplicates may
	// come before some originals, so stopping at 4*perStream messages
	// could miss entries that did arrive.
	c, err := kafka.ConsumeN(cctx, brokers, "outbox-"+topic, []string{topic}, int64(send.sent), func(_ context.Context, key, value []byte) error {
		user, n, _ := strings.Cut(string(value), " ")
		if user != string(key) {
			t.Errorf("message %s / %s: key is not the entry's k field", key, value)
		}
		mu.Lock()
		seen[n]++
		mu.Unlock()
		return nil
	}, kafka.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4*perStream || c.Poisoned() != 0 {
		t.Fatalf("%d distinct entries reached Kafka (%d poisoned), want %d", len(seen), c.Poisoned(), 4*perStream)
	}
}

// TestPoisonWrapsBoth: a block's sentinel wrapped by Poison matches both.
func TestPoisonWrapsBoth(t *testing.T) {
	errBlock := errors.New("block: malformed")
	err := outbox.Poison(fmt.Errorf("decode: %w", errBlock))
	if !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, errBlock) {
		t.Fatalf("%v: Is(ErrPoison)=%v Is(errBlock)=%v, want both", err, errors.Is(err, outbox.ErrPoison), errors.Is(err, errBlock))
	}
	if outbox.Poison(nil) != nil {
		t.Fatal("Poison(nil) is not nil")
	}
}

// TestRunLogs: Run logs each failed pass at Warn, counting the failures in
// a row, and the pass that succeeds after them at Info; a quiet pass logs
// nothing.
func TestRunLogs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := testenv.NewRedis(t)
	stream := keys.NewSpace(r.Namespace).Key("b", "outbox")
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{outbox.FieldKey: "k", outbox.FieldValue: "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan []outbox.Message, 1)
	send := &flaky{p: outbox.Direct(func(_ context.Context, key, value []byte) error {
		got <- []outbox.Message{{Key: key, Value: value}}
		return nil
	}), down: 2}
	logs := obstest.NewLogs()
	relay := outbox.NewRelay(r.Client, []string{stream}, "t", send, outbox.WithLogger(logs.Logger))
	done := make(chan struct{})
	go func() { relay.Run(ctx, time.Millisecond, nil); close(done) }()
	<-got
	// Let a few quiet passes go by, then stop.
	for pending := int64(1); pending != 0; pending, _ = relay.Pending(ctx) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	<-done
	warn := "WARN outbox: relay pass failed; its entries stay for the next casebook.block=outbox topic=t relayed=0 failed_passes=%d retry_in=1ms err=outbox: publish " + stream + ": kafka: unreachable"
	want := []string{fmt.Sprintf(warn, 1), fmt.Sprintf(warn, 2), "INFO outbox: relay recovered casebook.block=outbox topic=t relayed=1 failed_passes=2"}
	if lines := logs.Lines(); fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("logged\n%q\nwant\n%q", lines, want)
	}
}
