package kafka

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

type instruments struct {
	handle, deadLetter *obs.Op

	mu   sync.Mutex
	lags map[partition]*atomic.Int64 // the partitions this consumer holds
}

type partition struct {
	topic string
	id    int32
}

func classifyHandle(err error) (string, string) {
	if errors.Is(err, outbox.ErrPoison) {
		return obs.Refused, "poison"
	}
	return obs.Error, ""
}

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("kafka", mp, tp)
	in := &instruments{handle: b.Op("handle", classifyHandle, "poison"), deadLetter: b.Op("dead_letter", nil), lags: map[partition]*atomic.Int64{}}
	lag, err := b.Meter().Int64ObservableGauge("casebook.kafka.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("Messages of a claimed partition not yet settled by this consumer: high-water mark − last settled offset − 1."))
	obs.Handle(err)
	_, err = b.Meter().RegisterCallback(func(_ context.Context, o metric.Observer) error {
		in.mu.Lock()
		defer in.mu.Unlock()
		for p, n := range in.lags {
			o.ObserveInt64(lag, n.Load(), metric.WithAttributes(
				attribute.String("messaging.destination.name", p.topic), attribute.Int("messaging.destination.partition.id", int(p.id))))
		}
		return nil
	}, lag)
	obs.Handle(err)
	return in
}

// claimed starts reporting a partition's lag, unknown (0) until its first
// message settles.
func (in *instruments) claimed(topic string, id int32) *atomic.Int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := &atomic.Int64{}
	in.lags[partition{topic, id}] = n
	return n
}

// released stops reporting it: another consumer owns it now.
func (in *instruments) released(topic string, id int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.lags, partition{topic, id})
}
