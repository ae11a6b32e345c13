package kafka

import (
	"context"
	"math"
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
	settled atomic.Int64 // unsettled until the first message is received
}

// unsettled marks a claim that started from no committed offset (sarama's
// InitialOffset is then the policy, OffsetOldest or OffsetNewest, not an
// offset) and has received nothing yet.
const unsettled = math.MinInt64

// lag is the claim's lag now. Before its first message, a claim that
// starts at the oldest offset is behind by the whole partition (taken to
// start at 0: an upper bound once retention deleted some), one that starts
// at the newest by nothing.
func (c *claimed) lag() int64 {
	settled := c.settled.Load()
	if settled == unsettled {
		if c.claim.InitialOffset() == sarama.OffsetOldest {
			settled = -1
		} else {
			return 0
		}
	}
	return max(0, c.claim.HighWaterMarkOffset()-settled-1)
}

// received notes that message offset arrived: the first one fixes where an
// unsettled claim started.
func (c *claimed) received(offset int64) { c.settled.CompareAndSwap(unsettled, offset-1) }

func newInstruments(group string, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("kafka", mp, tp)
	in := &instruments{handle: b.Op("handle", obs.RefuseIf(outbox.ErrPoison, "poison"), "poison"), deadLetter: b.Op("dead_letter", nil), claims: map[partition]*claimed{}}
	var groupAttr []attribute.KeyValue
	if group != "" {
		groupAttr = []attribute.KeyValue{attribute.String("messaging.consumer.group.name", group)}
	}
	lag, err := b.Meter().Int64ObservableGauge("casebook.kafka.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("Messages of a claimed partition not yet settled by this consumer: high-water mark − last settled offset − 1, at collection."))
	obs.Handle(err)
	in.gauges = obs.Register(b.Meter(), func(_ context.Context, o metric.Observer) error {
		in.mu.Lock()
		defer in.mu.Unlock()
		for p, c := range in.claims {
			// Read at collection, so a consumer stuck retrying one message
			// shows its lag growing.
			o.ObserveInt64(lag, c.lag(), metric.WithAttributes(append(groupAttr,
				attribute.String("messaging.destination.name", p.topic),
				attribute.String("messaging.destination.partition.id", strconv.Itoa(int(p.id))))...))
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
	if off := c.InitialOffset(); off >= 0 {
		cl.settled.Store(off - 1)
	} else {
		cl.settled.Store(unsettled)
	}
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
