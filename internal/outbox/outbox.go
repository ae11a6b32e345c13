// Package outbox relays events that Lua scripts recorded in Redis Streams
// (XADD in the same script as the state change, so the event exists if and
// only if the change happened) to Kafka.
//
// Delivery is at-least-once: an entry is deleted (XDEL) only after Kafka
// acknowledged it, so a relay that crashes between the two sends it again,
// and consumers must be idempotent. While Kafka is unreachable entries wait in
// Redis and go out on a later pass. Run one relay per outbox set; two relays
// on the same streams only send duplicates.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/kafka"
)

// Sender is the part of kafka.Producer the relay needs.
type Sender interface {
	SendBatch([]kafka.Message) error
}

// Relay moves entries from outbox streams to a Kafka topic.
type Relay struct {
	rdb      redis.UniversalClient
	streams  []string
	topic    string
	keyField string
	send     Sender
	batch    int64
}

// NewRelay relays every stream in streams to topic, keying each message by
// the entry's keyField (so one entity's events stay in order on one
// partition). Messages carry the entry's fields as a JSON object.
func NewRelay(rdb redis.UniversalClient, streams []string, topic, keyField string, send Sender) *Relay {
	return &Relay{rdb: rdb, streams: streams, topic: topic, keyField: keyField, send: send, batch: 500}
}

// Drain makes one pass: for each stream, send up to 500 entries and delete
// the ones Kafka acknowledged. It returns how many entries were relayed;
// on error the entries not acknowledged stay for the next pass.
func (r *Relay) Drain(ctx context.Context) (int, error) {
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
	entries, err := r.rdb.XRangeN(ctx, stream, "-", "+", r.batch).Result()
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	msgs := make([]kafka.Message, len(entries))
	ids := make([]string, len(entries))
	for i, e := range entries {
		value, err := json.Marshal(e.Values)
		if err != nil {
			return 0, fmt.Errorf("outbox: encode %s %s: %w", stream, e.ID, err)
		}
		key, _ := e.Values[r.keyField].(string)
		msgs[i] = kafka.Message{Topic: r.topic, Key: key, Value: value}
		ids[i] = e.ID
	}
	if err := r.send.SendBatch(msgs); err != nil {
		return 0, fmt.Errorf("outbox: relay %s: %w", stream, err)
	}
	if err := r.rdb.XDel(ctx, stream, ids...).Err(); err != nil {
		return 0, fmt.Errorf("outbox: delete relayed entries of %s: %w", stream, err)
	}
	return len(entries), nil
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
// (nil: ignored) and carrying on: a Kafka outage only delays entries.
func (r *Relay) Run(ctx context.Context, interval time.Duration, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.DrainAll(ctx); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pending counts the entries waiting in all streams.
func (r *Relay) Pending(ctx context.Context) (int64, error) {
	var n int64
	for _, s := range r.streams {
		l, err := r.rdb.XLen(ctx, s).Result()
		if err != nil {
			return 0, err
		}
		n += l
	}
	return n, nil
}
