package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// telemetry is the shop's OpenTelemetry metrics, exported for Prometheus
// at GET /metrics: every block the shop wires (seckill, order, the outbox
// relay, the Kafka consumers) reports to it, and so do the catalog's
// product lookups. A registry of its own, so that two shops in one process
// (the tests) do not mix.
type telemetry struct {
	mp      *sdkmetric.MeterProvider
	handler http.Handler
	lookups metric.Int64Counter
	// lookup options by layer and result
	localHit, localMiss, redisHit, redisMiss, sqlHit, sqlMiss metric.AddOption
}

func newTelemetry() (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	t := &telemetry{mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	t.lookups, err = t.mp.Meter("github.com/casebook-dev/casebook/examples/shop").Int64Counter("shop.product.lookups",
		metric.WithUnit("{lookup}"),
		metric.WithDescription("Product detail lookups by cache layer (local, redis, sql) and result (hit, miss); a miss goes to the next layer, an SQL miss is no such product."))
	if err != nil {
		return nil, err
	}
	opt := func(layer, result string) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("casebook.cache.layer", layer), attribute.String("casebook.cache.result", result)))
	}
	t.localHit, t.localMiss = opt("local", "hit"), opt("local", "miss")
	t.redisHit, t.redisMiss = opt("redis", "hit"), opt("redis", "miss")
	t.sqlHit, t.sqlMiss = opt("sql", "hit"), opt("sql", "miss")
	return t, nil
}

// looked counts one lookup.
func (t *telemetry) looked(ctx context.Context, opt metric.AddOption) { t.lookups.Add(ctx, 1, opt) }

func (t *telemetry) close() { t.mp.Shutdown(context.Background()) }
