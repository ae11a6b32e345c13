package outbox

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

type instruments struct {
	block    *obs.Block
	drain    *obs.Op
	messages metric.Int64Counter
	ok, bad  metric.AddOption
	gauges   *obs.Registration
}

func newInstruments(r *Relay, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("outbox", mp, tp)
	in := &instruments{block: b, drain: b.Op("drain", nil),
		ok:  metric.WithAttributeSet(attribute.NewSet(obs.KeyOutcome.String(obs.OK))),
		bad: metric.WithAttributeSet(attribute.NewSet(obs.KeyOutcome.String(obs.Error)))}
	m := b.Meter()
	var err error
	in.messages, err = m.Int64Counter("casebook.outbox.relayed", metric.WithUnit("{message}"),
		metric.WithDescription("Messages handed to the publisher: ok when acknowledged, error when the publish failed (they are sent again)."))
	obs.Handle(err)
	pending, err := m.Int64ObservableGauge("casebook.outbox.pending", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries waiting in an outbox stream."))
	obs.Handle(err)
	oldest, err := m.Float64ObservableGauge("casebook.outbox.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest entry waiting in an outbox stream (by its id's time, Redis' clock); 0 when empty."))
	obs.Handle(err)
	streams := make([]attribute.Set, len(r.streams))
	for i, s := range r.streams {
		streams[i] = attribute.NewSet(attribute.String("casebook.outbox.stream", s))
	}
	in.gauges = obs.Register(m, func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		pipe := r.rdb.Pipeline()
		lens := make([]*redis.IntCmd, len(r.streams))
		firsts := make([]*redis.XMessageSliceCmd, len(r.streams))
		for i, s := range r.streams {
			lens[i] = pipe.XLen(ctx, s)
			firsts[i] = pipe.XRangeN(ctx, s, "-", "+", 1)
		}
		pipe.Exec(ctx) // each command's own error is read below
		now := time.Now()
		for i := range r.streams {
			n, err := lens[i].Result()
			if err != nil {
				continue // no figure rather than a wrong one
			}
			o.ObserveInt64(pending, n, metric.WithAttributeSet(streams[i]))
			age := 0.0
			if first, err := firsts[i].Result(); err == nil && len(first) == 1 {
				if ms, ok := idMillis(first[0].ID); ok {
					age = max(0, now.Sub(time.UnixMilli(ms)).Seconds())
				}
			}
			o.ObserveFloat64(oldest, age, metric.WithAttributeSet(streams[i]))
		}
		return nil
	}, pending, oldest)
	return in
}

// idMillis is the time part of a stream entry id "<ms>-<seq>".
func idMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}

func (in *instruments) relayed(ctx context.Context, n int, ok bool) {
	if !in.block.Metering() {
		return
	}
	opt := in.bad
	if ok {
		opt = in.ok
	}
	in.messages.Add(ctx, int64(n), opt)
}

// close unregisters the gauges' callback; safe to call twice.
func (in *instruments) close() error {
	return in.gauges.Close()
}
