package shortlink

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

// instruments are the Service's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	shorten, resolve, redirect, del, stats, qr, update, history *obs.Op
	clicks, breakdown, uniques, list, shortenMany               *obs.Op
	lookups                                                     *obs.Registration
}

// The cache layers a lookup walks, and what each one answered.
const (
	layerLocal = iota // the in-process ristretto cache
	layerRedis
	layerSQL
	layers
)

const (
	resultHit      = iota // the layer held the link
	resultNegative        // the layer remembered that the code does not exist
	resultMiss            // the layer did not know it (SQL: no such row)
	resultError           // the layer failed (a backend error, the context ended): the lookup fails
	results
)

// answers are the results each layer can give, as the metric names them.
var answers = [layers]struct {
	layer   string
	results []int
}{
	{"local", []int{resultHit, resultNegative, resultMiss}},
	{"redis", []int{resultHit, resultNegative, resultMiss, resultError}},
	{"sql", []int{resultHit, resultMiss, resultError}},
}

var resultNames = [results]string{"hit", "negative", "miss", "error"}

// cacheCounters count the layers' answers, for CacheStats and the lookups
// metric: an atomic add per answer, what a lookup paid before it was
// observed, so the metric costs a lookup nothing; the SDK reads the
// counters when it collects.
type cacheCounters [layers][results]atomic.Int64

func (c *cacheCounters) add(layer, result int) { c[layer][result].Add(1) }

// refusals are the errors the metrics count as refused, with their reasons;
// the first match wins (ErrBlocked wraps ErrInvalidURL, ErrMaxVisits
// ErrExpired).
var refusals = []obs.Reason{
	{Err: ErrBlocked, Name: "blocked"},
	{Err: ErrInvalidURL, Name: "invalid"},
	{Err: ErrInvalidAlias, Name: "invalid"},
	{Err: ErrInvalidOptions, Name: "invalid"},
	{Err: errBody, Name: "invalid"},
	{Err: ErrAliasTaken, Name: "alias_taken"},
	{Err: ErrConflict, Name: "conflict"},
	{Err: ErrRateLimited, Name: "rate_limited"},
	{Err: ErrNotFound, Name: "not_found"},
	{Err: ErrMaxVisits, Name: "max_visits"},
	{Err: ErrExpired, Name: "expired"},
	{Err: ErrClosed, Name: "closed"},
	{Err: ErrUnauthorized, Name: "unauthorized"},
}

func classify(err error) (string, string) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) { // a request body over maxBody
		return obs.Refused, "invalid"
	}
	if name, ok := obs.Match(err, refusals); ok {
		return obs.Refused, name
	}
	return obs.Error, ""
}

func newInstruments(counts *cacheCounters, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("shortlink", mp, tp)
	read := []string{"not_found", "expired", "max_visits", "rate_limited", "closed"}
	in := &instruments{
		shorten:   b.Op("shorten", classify, "invalid", "blocked", "alias_taken", "rate_limited", "closed", "unauthorized"),
		resolve:   b.Op("resolve", classify, read...),
		redirect:  b.Op("redirect", classify, read...),
		del:       b.Op("delete", classify, "not_found", "rate_limited", "unauthorized"),
		stats:     b.Op("stats", classify, "not_found", "rate_limited", "unauthorized"),
		qr:        b.Op("qr", classify, append(read, "invalid")...),
		update:    b.Op("update", classify, "invalid", "blocked", "not_found", "conflict", "rate_limited", "closed", "unauthorized"),
		history:   b.Op("history", classify, "invalid", "not_found", "rate_limited", "unauthorized"),
		clicks:    b.Op("clicks", classify, "invalid", "not_found", "rate_limited", "unauthorized"),
		breakdown: b.Op("breakdown", classify, "invalid", "not_found", "rate_limited", "unauthorized"),
		uniques:   b.Op("uniques", classify, "invalid", "not_found", "rate_limited", "unauthorized"),
		list:      b.Op("list", classify, "invalid", "closed", "unauthorized"),
		// A batch is refused whole only for its size or after Close; its
		// items' refusals are in their results.
		shortenMany: b.Op("shorten_many", classify, "invalid", "closed", "unauthorized"),
	}
	lookups, err := b.Meter().Int64ObservableCounter("casebook.shortlink.cache.lookups", metric.WithUnit("{lookup}"),
		metric.WithDescription("Link lookups by cache layer (local, redis, sql) and the layer's answer (hit, negative, miss, error)."))
	obs.Handle(err)
	var sets [layers][results]metric.ObserveOption
	for l, a := range answers {
		for _, r := range a.results {
			sets[l][r] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("casebook.cache.layer", a.layer), attribute.String("casebook.cache.result", resultNames[r])))
		}
	}
	in.lookups = obs.Register(b.Meter(), func(_ context.Context, o metric.Observer) error {
		for l, a := range answers {
			for _, r := range a.results {
				o.ObserveInt64(lookups, counts[l][r].Load(), sets[l][r])
			}
		}
		return nil
	}, lookups)
	return in
}

// close stops the lookups metric's collection; safe to call twice.
func (in *instruments) close() { obs.Handle(in.lookups.Close()) }
