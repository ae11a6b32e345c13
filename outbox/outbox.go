// Package outbox carries a block's events from the atomic state change that
// caused them to whoever consumes them, with no Kafka client in the blocks.
//
// Producing side: a block's Lua script appends an event to a Redis Stream in
// the same script as the state change (so the event exists if and only if the
// change happened). Every entry has two fields, "k" (the message key, e.g. a
// campaign or user id) and "v" (the message value, a versioned format the
// block documents and decodes). A Relay copies entries to a Publisher — the
// casebook/kafka package adapts a sarama producer, any other client can
// implement the one method — and deletes an entry (XDEL) only after the
// publisher acknowledged it.
//
// Consuming side: a block's consumer is a Handler, which takes the message's
// key and value as bytes, so any Kafka client can drive it. A handler returns
// an error wrapping ErrPoison for a message that can never succeed (malformed,
// unknown version, a value no layer can store); consumers skip or dead-letter
// such a message and count it, so one bad message never blocks its partition.
// Any other error is transient: the consumer retries the same message.
//
// Delivery is at-least-once: a relay that crashes between the publisher's
// acknowledgement and the delete sends those entries again, so every handler
// in casebook is idempotent. While the publisher fails, entries wait in Redis
// and go out on a later pass. Run one relay per set of streams; a second relay
// on the same streams is safe but only adds duplicates.
//
// What Redis forgets, the outbox forgets: a failover to a replica that missed
// the last writes loses their entries together with the state change that
// made them (each block's Reconcile repairs that from SQL).
//
// Observability: a Relay emits OpenTelemetry metrics and spans (by default
// to the global providers; with none installed it costs nothing):
//
//	casebook.outbox.operation.duration  histogram (s)        casebook.operation=drain, casebook.outcome
//	casebook.outbox.operations          counter              the same
//	casebook.outbox.relayed             counter (messages)   casebook.outcome: ok (published and acknowledged) or error (a failed publish, sent again later)
//	casebook.outbox.pending             gauge (entries)      per stream (casebook.outbox.stream), XLEN at collection
//	casebook.outbox.oldest_age          gauge (s)            per stream: this process's clock − the oldest entry's id time (Redis' clock when it was added), 0 when empty
//
// and a span "outbox.drain" per Drain.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

// ErrPoison marks a message that can never be handled: consumers skip or
// dead-letter it instead of retrying. Blocks wrap it in their own sentinel,
// so errors.Is matches both.
var ErrPoison = errors.New("outbox: poison message")

// Poison returns err marked as poison (errors.Is(…, ErrPoison) holds) while
// keeping err itself matchable.
func Poison(err error) error {
	if err == nil || errors.Is(err, ErrPoison) {
		return err
	}
	return poisoned{err}
}

type poisoned struct{ error }

func (p poisoned) Unwrap() []error { return []error{p.error, ErrPoison} }

// Handler processes one message. It returns nil when the message is applied
// (or was applied before), an error wrapping ErrPoison when it never can be,
// and any other error for a retry.
type Handler func(ctx context.Context, key, value []byte) error

// Message is one record for a Publisher.
type Message struct {
	Topic string
	Key   []byte
	Value []byte
}

// Publisher delivers messages and returns nil only once every one of them is
// durably acknowledged. On error some may have been delivered: the relay
// sends the whole batch again.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) error
}

// Stream entry fields every block's scripts write.
const (
	FieldKey   = "k"
	FieldValue = "v"
)

// DefaultBatch is how many entries of one stream a pass reads at most.
const DefaultBatch = 500

// Relay moves entries from outbox streams to a topic.
type Relay struct {
	rdb     redis.UniversalClient
	streams []string
	topic   string
	pub     Publisher
	obs     *instruments
	log     *slog.Logger
	mu      sync.Mutex // Close
}

// RelayOption configures a Relay.
type RelayOption func(*relayOptions)

type relayOptions struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	logger  *slog.Logger
}

// WithLogger makes Run log each failed pass at Warn (the entries stay and
// the next pass retries them) and the first pass that succeeds after
// failures at Info. Without it the relay is silent.
func WithLogger(l *slog.Logger) RelayOption {
	return func(o *relayOptions) { o.logger = l }
}

// WithMeterProvider sends the relay's metrics to mp instead of
// OpenTelemetry's global provider.
func WithMeterProvider(mp metric.MeterProvider) RelayOption {
	return func(o *relayOptions) { o.meters = mp }
}

// WithTracerProvider sends the relay's spans to tp instead of
// OpenTelemetry's global provider.
func WithTracerProvider(tp trace.TracerProvider) RelayOption {
	return func(o *relayOptions) { o.tracers = tp }
}

// NewRelay relays every stream in streams to topic through pub. Blocks name
// their streams (e.g. seckill's Service.Outboxes). It emits the metrics and
// spans in the package documentation to OpenTelemetry's global providers
// unless told otherwise.
func NewRelay(rdb redis.UniversalClient, streams []string, topic string, pub Publisher, opts ...RelayOption) *Relay {
	var o relayOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := &Relay{rdb: rdb, streams: streams, topic: topic, pub: pub, log: obs.Logger(o.logger, "outbox")}
	r.obs = newInstruments(r, o.meters, o.tracers)
	return r
}

// Drain makes one pass: for each stream, publish up to DefaultBatch entries
// and delete the ones acknowledged. It returns how many entries were relayed;
// on error the entries not acknowledged stay for the next pass. An entry
// without a value field is published with an empty value, so the consumer
// counts and skips it rather than the relay stalling on it.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	ctx, call := r.obs.drain.Start(ctx)
	n, err := r.drain(ctx)
	return n, call.End(err)
}

func (r *Relay) drain(ctx context.Context) (int, error) {
	total := 0
	for _, stream := range r.streams {
		n, err := r.drainStream(ctx, stream)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (r *Relay) drainStream(ctx context.Context, stream string) (int, error) {
	entries, err := r.rdb.XRangeN(ctx, stream, "-", "+", DefaultBatch).Result()
	if err != nil {
		return 0, fmt.Errorf("outbox: read %s: %w", stream, err)
	}
	if len(entries) == 0 {
		return 0, nil
	}
	msgs := make([]Message, len(entries))
	ids := make([]string, len(entries))
	for i, e := range entries {
		msgs[i] = Message{Topic: r.topic, Key: field(e, FieldKey), Value: field(e, FieldValue)}
		ids[i] = e.ID
	}
	if err := r.pub.Publish(ctx, msgs); err != nil {
		r.obs.relayed(ctx, len(msgs), false)
		return 0, fmt.Errorf("outbox: publish %s: %w", stream, err)
	}
	r.obs.relayed(ctx, len(msgs), true)
	if err := r.rdb.XDel(ctx, stream, ids...).Err(); err != nil {
		return 0, fmt.Errorf("outbox: delete relayed entries of %s: %w", stream, err)
	}
	return len(entries), nil
}

func field(e redis.XMessage, name string) []byte {
	s, _ := e.Values[name].(string)
	return []byte(s)
}

// DrainAll drains until a pass finds nothing (or fails) and returns the
// entries relayed.
func (r *Relay) DrainAll(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := r.Drain(ctx)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// Run drains every interval until ctx ends, reporting errors to onError
// (nil: ignored) and to the relay's logger, and carrying on: a publisher
// outage only delays entries.
func (r *Relay) Run(ctx context.Context, interval time.Duration, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := 0 // passes failed in a row
	for {
		n, err := r.DrainAll(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			failed++
			r.log.Warn("outbox: relay pass failed; its entries stay for the next", "topic", r.topic,
				"relayed", n, "failed_passes", failed, "retry_in", interval, "err", err)
			if onError != nil {
				onError(err)
			}
		case failed > 0:
			r.log.Info("outbox: relay recovered", "topic", r.topic, "relayed", n, "failed_passes", failed)
			failed = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops the relay's gauges (pending, oldest_age) from being collected:
// a relay made for one run — a cron's DrainAll — should be closed, or every
// collection keeps reading its streams. It is safe to call twice; the relay
// still drains after it, uncounted by the gauges.
func (r *Relay) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.obs.close()
}

// Pending counts the entries waiting in all streams.
func (r *Relay) Pending(ctx context.Context) (int64, error) {
	var n int64
	for _, s := range r.streams {
		l, err := r.rdb.XLen(ctx, s).Result()
		if err != nil {
			return 0, fmt.Errorf("outbox: length of %s: %w", s, err)
		}
		n += l
	}
	return n, nil
}

// Direct is a Publisher that hands each message straight to h, in order,
// with no broker between: for tests, examples and single-process
// deployments. An error from h fails the batch, so the relay keeps the
// entries and sends them again (h must be idempotent, as every casebook
// handler is). A poison message fails the batch too: with no broker to
// skip it past, it waits in the stream for a person.
func Direct(h Handler) Publisher { return direct(h) }

type direct Handler

func (d direct) Publish(ctx context.Context, msgs []Message) error {
	for _, m := range msgs {
		if err := d(ctx, m.Key, m.Value); err != nil {
			return err
		}
	}
	return nil
}
