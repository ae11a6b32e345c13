package hotlist

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

// instruments are a List's metrics and spans (see doc.go, Observability).
type instruments struct {
	block *obs.Block
	top, snapshot, publish, claim, flush,
	pin, unpin, blockItem, unblock *obs.Op
	list attribute.Set // casebook.hotlist.list: the list's name
}

func newInstruments(name string, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("hotlist", mp, tp)
	invalid := obs.RefuseIf(ErrInvalid, "invalid")
	return &instruments{block: b,
		top:       b.Op("top", invalid, "invalid"),
		snapshot:  b.Op("snapshot", obs.RefuseIf(ErrNoSnapshot, "no_snapshot"), "no_snapshot"),
		publish:   b.Op("publish", obs.RefuseIf(ErrPublishConflict, "conflict"), "conflict"),
		claim:     b.Op("claim", invalid, "invalid"),
		flush:     b.Op("flush", obs.RefuseIf(ErrClosed, "closed"), "closed"),
		pin:       b.Op("pin", invalid, "invalid"),
		unpin:     b.Op("unpin", invalid, "invalid"),
		blockItem: b.Op("block", invalid, "invalid"),
		unblock:   b.Op("unblock", invalid, "invalid"),
		list:      attribute.NewSet(attribute.String("casebook.hotlist.list", name)),
	}
}

// registerAggregator registers an Aggregator's observable instruments, read
// from its Stats and claims at collection (so Add records nothing).
func (a *Aggregator) registerAggregator() *obs.Registration {
	in := a.l.obs
	m := in.block.Meter()
	events, err := m.Int64ObservableCounter("casebook.hotlist.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events an Aggregator took, by result: aggregated, rejected (unknown kind, future time, wrong partition, like without user) or expired (Window: its slot had left the ring)."))
	obs.Handle(err)
	messages, err := m.Int64ObservableCounter("casebook.hotlist.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages an Aggregator refused whole, by result: malformed (poison) or duplicate (at or below an applied offset, skipped)."))
	obs.Handle(err)
	flushes, err := m.Int64ObservableCounter("casebook.hotlist.flushes", metric.WithUnit("{flush}"),
		metric.WithDescription("Flushes that carried offsets, by result: applied, or replayed (found applied already: a retry after a lost reply)."))
	obs.Handle(err)
	entries, err := m.Int64ObservableCounter("casebook.hotlist.flushed.entries", metric.WithUnit("{entry}"),
		metric.WithDescription("Item entries (an item per slot, or a user's like) in applied flushes."))
	obs.Handle(err)
	fallbacks, err := m.Int64ObservableCounter("casebook.hotlist.flush.fallbacks", metric.WithUnit("{flush}"),
		metric.WithDescription("Decay flushes meant for a WATCH transaction that the script made instead (Redis not as the claim's copy said, the transaction aborted or refused, an error)."))
	obs.Handle(err)
	resyncs, err := m.Int64ObservableCounter("casebook.hotlist.resyncs", metric.WithUnit("{claim}"),
		metric.WithDescription("Claims closed with ErrResync (another consumer applied offsets past them, or Redis lost writes)."))
	obs.Handle(err)
	lag, err := m.Float64ObservableGauge("casebook.hotlist.flush.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest event this Aggregator's open claims hold unflushed (0 when none): how far Redis is behind what was consumed."))
	obs.Handle(err)
	claims, err := m.Int64ObservableGauge("casebook.hotlist.claims", metric.WithUnit("{claim}"),
		metric.WithDescription("Open claims (partitions) of this Aggregator."))
	obs.Handle(err)
	by := func(key, value string) metric.ObserveOption {
		return metric.WithAttributeSet(withAttrs(in.list, attribute.String(key, value)))
	}
	list := metric.WithAttributeSet(in.list)
	var (
		aggregated, rejected, expired = by("casebook.hotlist.result", "aggregated"), by("casebook.hotlist.result", "rejected"), by("casebook.hotlist.result", "expired")
		malformed, duplicate          = by("casebook.hotlist.result", "malformed"), by("casebook.hotlist.result", "duplicate")
		applied, replayed             = by("casebook.hotlist.result", "applied"), by("casebook.hotlist.result", "replayed")
	)
	reg := obs.Register(m, func(_ context.Context, o metric.Observer) error {
		s := a.Stats()
		o.ObserveInt64(events, s.Events, aggregated)
		o.ObserveInt64(events, s.Rejected, rejected)
		o.ObserveInt64(events, s.Expired, expired)
		o.ObserveInt64(messages, s.Malformed, malformed)
		o.ObserveInt64(messages, s.Duplicates, duplicate)
		o.ObserveInt64(flushes, s.Flushes, applied)
		o.ObserveInt64(flushes, s.Replays, replayed)
		o.ObserveInt64(entries, s.Flushed, list)
		o.ObserveInt64(resyncs, s.Resyncs, list)
		o.ObserveInt64(fallbacks, s.Fallbacks, list)
		oldest, open := a.open.oldest()
		age := 0.0
		if oldest > 0 {
			age = max(0, float64(a.l.cfg.Now().UnixMilli()-oldest)/1000)
		}
		o.ObserveFloat64(lag, age, list)
		o.ObserveInt64(claims, int64(open), list)
		return nil
	}, events, messages, flushes, entries, resyncs, fallbacks, lag, claims)
	return reg
}

func withAttrs(set attribute.Set, kv ...attribute.KeyValue) attribute.Set {
	return attribute.NewSet(append(set.ToSlice(), kv...)...)
}

// openClaims are an Aggregator's open claims, for the lag gauge.
type openClaims struct {
	mu     sync.Mutex
	claims map[*Claim]struct{}
}

func (o *openClaims) add(c *Claim) {
	o.mu.Lock()
	if o.claims == nil {
		o.claims = map[*Claim]struct{}{}
	}
	o.claims[c] = struct{}{}
	o.mu.Unlock()
}

func (o *openClaims) remove(c *Claim) {
	o.mu.Lock()
	delete(o.claims, c)
	o.mu.Unlock()
}

// oldest returns the earliest unflushed-since time (Unix ms, 0 for none)
// among the open claims, and how many there are.
func (o *openClaims) oldest() (int64, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var first int64
	for c := range o.claims {
		if ms := c.unflushedSince.Load(); ms > 0 && (first == 0 || ms < first) {
			first = ms
		}
	}
	return first, len(o.claims)
}
