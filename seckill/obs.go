package seckill

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

// instruments are the Service's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	block                              *obs.Block
	buy, buyBatched, handle, reconcile *obs.Op
	batch                              metric.Int64Histogram
	drift                              metric.Int64Gauge
	gauges                             *obs.Registration
}

// buyReasons are the refusals a purchase can meet, as the metrics name
// them.
var buyReasons = []obs.Reason{
	{Err: ErrSoldOut, Name: "sold_out"},
	{Err: ErrLimitReached, Name: "limit_reached"},
	{Err: ErrRateLimited, Name: "rate_limited"},
	{Err: ErrNotStarted, Name: "not_started"},
	{Err: ErrEnded, Name: "ended"},
	{Err: ErrInvalid, Name: "invalid"},
	{Err: ErrNoCampaign, Name: "no_campaign"},
	{Err: ErrBatcherClosed, Name: "closed"},
}

var classifyBuy = obs.Refuse(buyReasons...)

func newInstruments(s *Service, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("seckill", mp, tp)
	reasons := obs.Names(buyReasons)
	in := &instruments{block: b,
		buy:        b.Op("buy", classifyBuy, reasons...),
		buyBatched: b.Op("buy_batched", classifyBuy, reasons...),
		handle:     b.Op("handle_order", obs.RefuseIf(outbox.ErrPoison, "poison"), "poison"),
		reconcile:  b.Op("reconcile", nil),
	}
	m := b.Meter()
	var err error
	in.batch, err = m.Int64Histogram("casebook.seckill.batch.size", metric.WithUnit("{buyer}"),
		metric.WithDescription("Buyers decided by one call of the buy script (Batcher)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
	obs.Handle(err)
	in.drift, err = m.Int64Gauge("casebook.seckill.reconcile.drift", metric.WithUnit("{unit}"),
		metric.WithDescription("Redis stock + units in flight − SQL stock at the last Reconcile, per campaign: 0 when they agree."))
	obs.Handle(err)
	stock, err := m.Int64ObservableGauge("casebook.seckill.stock", metric.WithUnit("{unit}"),
		metric.WithDescription("Units left in Redis, per campaign opened by this process (buckets whose state was lost count 0)."))
	obs.Handle(err)
	in.gauges = obs.Register(m, func(ctx context.Context, o metric.Observer) error {
		s.mu.Lock()
		sales := make([]*Sale, 0, len(s.sales))
		now := s.cfg.Now()
		for _, sl := range s.sales {
			if now.Before(sl.c.Ends) { // an ended campaign's stock is not read
				sales = append(sales, sl)
			}
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for _, sl := range sales {
			stocks, err := sl.bucketStocks(ctx)
			if err != nil {
				continue // no figure rather than a wrong one
			}
			var left int64
			for _, n := range stocks {
				left += max(n, 0)
			}
			o.ObserveInt64(stock, left, metric.WithAttributeSet(sl.attrs))
		}
		return nil
	}, stock)
	return in
}

// campaignAttrs are a campaign's metric attributes: its id, which the
// operator chose (few per process), never a buyer's.
func campaignAttrs(id string) attribute.Set {
	return attribute.NewSet(attribute.String("casebook.seckill.campaign", id))
}
