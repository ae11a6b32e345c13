package kafka

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

type instruments struct {
	handle, deadLetter *obs.Op
	gauges             *obs.Registration

	mu     sync.Mutex
	claims map[partition]*claimed // the partitions this consumer holds
}

type partition struct {
	topic string
	id    int32
}

// claimed is a held partition: its claim (for the high-water mark, which
// sarama reads atomically) and the offset last settled.
type claimed struct {
	claim   sarama.ConsumerGroupClaim
	settled atomic.Int64
}

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("kafka", mp, tp)
	in := &instruments{handle: b.Op("handle", obs.RefuseIf(outbox.ErrPoison, "poison"), "poison"), deadLetter: b.Op("dead_letter", nil), claims: map[partition]*claimed{}}
	lag, err := b.Meter().Int64ObservableGauge("casebook.kafka.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("Messages of a claimed partition not yet settled by this consumer: high-water mark − last settled offset − 1, at collection."))
	obs.Handle(err)
	in.gauges = obs.Register(b.Meter(), func(_ context.Context, o metric.Observer) error {
		in.mu.Lock()
		defer in.mu.Unlock()
		for p, c := range in.claims {
			// Read at collection, so a consumer stuck retrying one message
			// shows its lag growing.
			o.ObserveInt64(lag, max(0, c.claim.HighWaterMarkOffset()-c.settled.Load()-1), metric.WithAttributes(
				attribute.String("messaging.destination.name", p.topic),
				attribute.String("messaging.destination.partition.id", strconv.Itoa(int(p.id)))))
		}
		return nil
	}, lag)
	return in
}

// claim starts reporting a partition's lag: before its first message
// settles, everything from the claim's initial offset on is behind.
func (in *instruments) claim(c sarama.ConsumerGroupClaim) *claimed {
	in.mu.Lock()
	defer in.mu.Unlock()
	cl := &claimed{claim: c}
	cl.settled.Store(c.InitialOffset() - 1)
	in.claims[partition{c.Topic(), c.Partition()}] = cl
	return cl
}

// release stops reporting it: another consumer owns it now.
func (in *instruments) release(c sarama.ConsumerGroupClaim) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.claims, partition{c.Topic(), c.Partition()})
}

// close unregisters the lag gauge; safe to call twice.
func (in *instruments) close() error {
	return in.gauges.Close()
}
