package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/outbox"
)

// AsyncPublisher is an outbox.Publisher over a sarama AsyncProducer that a
// service already runs: Publish feeds a batch into the producer's pipeline
// (batched with whatever else it carries) and returns once the brokers
// acknowledged every message of it, or with the first error. It reads the
// producer's Successes and Errors channels, so nothing else may: the
// producer needs Producer.Return.Successes and Return.Errors (Config sets
// both), and its messages' Metadata is the AsyncPublisher's. It is safe for
// concurrent use; it stops when the caller closes the producer.
type AsyncPublisher struct {
	p sarama.AsyncProducer
}

// asyncBatch is one Publish call waiting for its acknowledgements.
type asyncBatch struct {
	mu   sync.Mutex
	left int
	err  error
	done chan struct{}
}

func (b *asyncBatch) settle(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	if b.left--; b.left == 0 {
		close(b.done)
	}
}

// NewAsyncPublisher publishes through p, which the caller keeps and closes.
func NewAsyncPublisher(p sarama.AsyncProducer) *AsyncPublisher {
	go func() {
		for m := range p.Successes() {
			if b, ok := m.Metadata.(*asyncBatch); ok {
				b.settle(nil)
			}
		}
	}()
	go func() {
		for e := range p.Errors() {
			if b, ok := e.Msg.Metadata.(*asyncBatch); ok {
				b.settle(e.Err)
			}
		}
	}()
	return &AsyncPublisher{p: p}
}

// Publish produces msgs and waits until every one is acknowledged or ctx
// ends. On error some may have been written: callers retry the whole batch
// and rely on idempotent consumers.
func (a *AsyncPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	b := &asyncBatch{left: len(msgs), done: make(chan struct{})}
	for _, m := range msgs {
		pm := &sarama.ProducerMessage{Topic: m.Topic, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value), Metadata: b}
		select {
		case a.p.Input() <- pm:
		case <-ctx.Done():
			return fmt.Errorf("kafka: publish %d messages: %w", len(msgs), ctx.Err())
		}
	}
	select {
	case <-b.done:
		if b.err != nil {
			return fmt.Errorf("kafka: publish %d messages: %w", len(msgs), b.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: publish %d messages: %w", len(msgs), ctx.Err())
	}
}
