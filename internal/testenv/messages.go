package testenv

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
)

// Published is an outbox.Publisher that keeps what it is given, for a test
// to hand on (to a handler, or to ConsumeInOrder).
type Published struct {
	mu   sync.Mutex
	Msgs []outbox.Message
}

// Publish implements outbox.Publisher.
func (p *Published) Publish(_ context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Msgs = append(p.Msgs, msgs...)
	return nil
}

// Take returns what was published since the last Take, and forgets it.
func (p *Published) Take() []outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	msgs := p.Msgs
	p.Msgs = nil
	return msgs
}

// ConsumeInOrder publishes values, in order, to a new one-partition topic
// and consumes all of them with h through a real consumer group (poison
// messages skipped). It returns the consumer for its counts and how many of
// the poison messages wrapped sentinel.
func ConsumeInOrder(t testing.TB, values [][]byte, h outbox.Handler, sentinel error) (c *kafka.Consumer, matched int) {
	t.Helper()
	brokers := Kafka(t)
	topic := Topic(t, 1)
	msgs := make([]outbox.Message, len(values))
	for i, v := range values {
		msgs[i] = outbox.Message{Topic: topic, Key: []byte("k"), Value: v}
	}
	pub, err := kafka.Dial(brokers, "testenv-"+topic)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	c, err = kafka.ConsumeN(ctx, brokers, "testenv-"+topic, []string{topic}, int64(len(msgs)), h, kafka.ConsumerConfig{
		OnPoison: func(_ string, _ int32, _ int64, err error) {
			if errors.Is(err, sentinel) {
				matched++ // one partition: one claim goroutine calls this
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, matched
}
