package idgen

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

// The generators' metrics and spans (see doc.go, Observability): only the
// allocations that do I/O are operations; an id served from memory is
// counted by nothing.

// reasons are the refusals, as the metrics name them.
var reasons = []obs.Reason{
	{Err: ErrSegmentConfig, Name: "invalid"},
	{Err: ErrNoFreeNode, Name: "no_free_node"},
	{Err: ErrLeaseLost, Name: "lease_lost"},
	{Err: ErrClockBackwards, Name: "clock_backwards"},
}

var classify = obs.Refuse(reasons...)

func newBlock(mp metric.MeterProvider, tp trace.TracerProvider) (*obs.Block, func(string) *obs.Op) {
	b := obs.NewBlock("idgen", mp, tp)
	names := obs.Names(reasons)
	return b, func(name string) *obs.Op { return b.Op(name, classify, names...) }
}

// segmentInstruments are a Segment's: its lease fetches, and the ids it can
// hand out without one.
type segmentInstruments struct {
	fetch  *obs.Op
	gauges *obs.Registration
}

func newSegmentInstruments(s *Segment) *segmentInstruments {
	b, op := newBlock(s.cfg.MeterProvider, s.cfg.TracerProvider)
	in := &segmentInstruments{fetch: op("segment_fetch")}
	m := b.Meter()
	left, err := m.Int64ObservableGauge("casebook.idgen.segment.remaining", metric.WithUnit("{id}"),
		metric.WithDescription("Ids a Segment can hand out without a fetch: the rest of its current lease and the prefetched one, per tag."))
	obs.Handle(err)
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("casebook.idgen.tag", s.cfg.Tag)))
	in.gauges = obs.Register(m, func(_ context.Context, o metric.Observer) error {
		if n, ok := s.remaining(); ok {
			o.ObserveInt64(left, n, attrs)
		}
		return nil
	}, left)
	return in
}

// nodeInstruments are a NodeLease's: grant, renewals, release, and the
// leases lost.
type nodeInstruments struct {
	block                 *obs.Block
	grant, renew, release *obs.Op
	losses                metric.Int64Counter
	revoked, expired      metric.AddOption
}

func newNodeInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *nodeInstruments {
	b, op := newBlock(mp, tp)
	in := &nodeInstruments{block: b, grant: op("node_grant"), renew: op("node_renew"), release: op("node_release")}
	var err error
	in.losses, err = b.Meter().Int64Counter("casebook.idgen.node.lease.losses", metric.WithUnit("{lease}"),
		metric.WithDescription("Node leases lost before Close, by cause: revoked (the store says another holder has the id) or expired (every renewal failed until the deadline)."))
	obs.Handle(err)
	cause := func(c string) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("casebook.idgen.loss.cause", c)))
	}
	in.revoked, in.expired = cause("revoked"), cause("expired")
	return in
}

// lost counts a lease lost with opt, when metrics are wanted.
func (in *nodeInstruments) lost(opt metric.AddOption) {
	if in.block.Metering() {
		in.losses.Add(context.Background(), 1, opt)
	}
}

// snowflakeInstruments are a Snowflake's: its checkpoint reads and writes.
type snowflakeInstruments struct {
	load, save *obs.Op
}

func newSnowflakeInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *snowflakeInstruments {
	_, op := newBlock(mp, tp)
	return &snowflakeInstruments{load: op("checkpoint_load"), save: op("checkpoint_save")}
}
