package notify

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

// instruments are the Feed's metrics and spans: casebook.notify.* by
// operation and outcome (see internal/obs).
type instruments struct {
	add, handle, groups, counts, markSeen, markRead *obs.Op
}

// reasons are the refusals, as the metrics name them; poison first, since
// a message Add refuses is both.
var reasons = []obs.Reason{
	{Err: outbox.ErrPoison, Name: "poison"},
	{Err: ErrInvalid, Name: "invalid"},
	{Err: ErrCursor, Name: "cursor"},
}

var classify = obs.Refuse(reasons...)

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("notify", mp, tp)
	names := obs.Names(reasons)
	op := func(name string) *obs.Op { return b.Op(name, classify, names...) }
	return &instruments{add: op("add"), handle: op("handle"), groups: op("groups"), counts: op("counts"),
		markSeen: op("mark_seen"), markRead: op("mark_read")}
}
