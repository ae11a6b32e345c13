// Package hotkafka feeds a hotlist.Aggregator from a Kafka consumer group
// through IBM/sarama. It is the only part of hotlist that links a Kafka
// client; the aggregator itself takes (partition, offset, value).
//
// For each partition the group assigns, the Consumer opens a hotlist Claim,
// which reads the partition's last offset applied to Redis, and makes Kafka
// start there: a group with no committed offset, or with one past it (Redis
// lost writes in a failover), is moved to the claim's Resume offset and the
// session restarted; a committed offset behind it (a consumer killed
// between its flush and its commit) is simply read on, the claim skipping
// what Redis already has. Messages go to Claim.Add; the claim flushes when
// due — every FlushEvery, or once the aggregator's CaughtUpFlush has passed
// when the consumer has read to the partition's high-water mark (or no
// message came for a CaughtUpFlush), so that a drained backlog shows at
// once — and the offset after each flush is marked, so Kafka's committed
// offsets trail Redis' and never pass them. When the partition is taken
// away the claim flushes once more.
//
// Delivery into Redis is exactly-once (see hotlist's package doc); Kafka's
// own delivery is at-least-once and only costs re-reading.
package hotkafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/obs"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("hotkafka: invalid config")

// Config configures a Consumer.
type Config struct {
	// OnReject is told of each message the aggregator rejected in whole or
	// in part (for a log line and a metric); the partition moves on either
	// way. Nil: ignored (the aggregator's Stats count them).
	OnReject func(partition int32, offset int64, err error)
	// OnError is told of flush failures (retried after RetryBackoff) and of
	// partitions restarted at their Redis offset. Nil: ignored.
	OnError func(err error)
	// RetryBackoff is the pause before a failed flush is retried. Default
	// 100 ms.
	RetryBackoff time.Duration
	// ReleaseTimeout bounds the last flush of a partition taken away.
	// Default 10 s.
	ReleaseTimeout time.Duration
	// Logger, when set, hears of a message rejected (Warn), a flush that
	// failed (Warn for a batch's first failure, Debug for its retries), a
	// partition resynced or restarted at its Redis offset, a last flush
	// that missed its deadline, the group rejoining. Nil: silent.
	Logger *slog.Logger
}

// Consumer runs an aggregator in a consumer group. It is safe for
// concurrent use: sarama calls ConsumeClaim once per partition, each with
// its own hotlist Claim.
type Consumer struct {
	group    sarama.ConsumerGroup
	topic    string
	agg      *hotlist.Aggregator
	cfg      Config
	log      *slog.Logger
	restarts atomic.Int64
}

// New consumes topic through group (which the caller creates, with
// casebook/kafka's Config, and closes) into agg.
func New(group sarama.ConsumerGroup, topic string, agg *hotlist.Aggregator, cfg Config) (*Consumer, error) {
	if group == nil || topic == "" || agg == nil {
		return nil, fmt.Errorf("%w: a group, a topic and an aggregator are required", ErrConfig)
	}
	if cfg.RetryBackoff < 0 || cfg.ReleaseTimeout < 0 {
		return nil, fmt.Errorf("%w: negative durations", ErrConfig)
	}
	cfg.RetryBackoff = cmp.Or(cfg.RetryBackoff, 100*time.Millisecond)
	cfg.ReleaseTimeout = cmp.Or(cfg.ReleaseTimeout, 10*time.Second)
	return &Consumer{group: group, topic: topic, agg: agg, cfg: cfg, log: obs.Logger(cfg.Logger, "hotlist")}, nil
}

// Restarts counts sessions ended to move a partition's Kafka offset to its
// Redis offset, or to re-read after a hotlist.ErrResync.
func (c *Consumer) Restarts() int64 { return c.restarts.Load() }

// Run consumes until ctx ends (returning nil) or the group is closed.
// Rebalances and restarts rejoin after a pause.
func (c *Consumer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := c.group.Consume(ctx, []string{c.topic}, c); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return nil
			}
			c.report(fmt.Errorf("hotkafka: consume %s: %w", c.topic, err))
			if ctx.Err() == nil {
				c.log.Warn("hotkafka: consume failed; rejoining the group", "topic", c.topic, "retry_in", c.cfg.RetryBackoff, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.RetryBackoff):
			}
		}
	}
	return nil
}

// Setup implements sarama.ConsumerGroupHandler.
func (*Consumer) Setup(sarama.ConsumerGroupSession) error { return nil }

// Cleanup implements sarama.ConsumerGroupHandler.
func (*Consumer) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim implements sarama.ConsumerGroupHandler. Returning early (to
// move the offset, or after a resync) ends the session, as sarama does for
// any handler that returns; Run joins again.
func (c *Consumer) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	ctx, p := s.Context(), claim.Partition()
	hc, err := c.agg.Claim(ctx, p)
	if err != nil {
		return err
	}
	defer hc.Close() // after release, a no-op; else what was not flushed is re-read
	if c.moveOffset(s, claim, hc) {
		return nil
	}
	// The tick comes every CaughtUpFlush: a claim that has read to the
	// high-water mark flushes then, one behind it every FlushEvery. A
	// partition whose last record is not delivered (a transaction marker,
	// a record compacted away) never shows its last offset at the mark: a
	// tick period without a message counts as caught up too.
	tick := time.NewTicker(c.agg.CaughtUpFlush())
	defer tick.Stop()
	caughtUp, quiet := false, true
	due := func() bool { return hc.Due() || (caughtUp || quiet) && hc.DueCaughtUp() }
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok { // revoked
				c.release(s, hc)
				return nil
			}
			if err := hc.Add(m.Offset, m.Value); err != nil {
				c.log.Warn("hotkafka: message rejected", "topic", c.topic, "partition", p, "offset", m.Offset, "err", err)
				if c.cfg.OnReject != nil {
					c.cfg.OnReject(p, m.Offset, err)
				}
			}
			caughtUp, quiet = m.Offset+1 >= claim.HighWaterMarkOffset(), false
			if due() && !c.flush(s, hc) {
				return nil
			}
		case <-tick.C:
			if due() && !c.flush(s, hc) {
				return nil
			}
			quiet = true // until a message comes before the next tick
		case <-ctx.Done():
			c.release(s, hc)
			return nil
		}
	}
}

// moveOffset makes the session start the partition at the claim's Resume
// offset when Kafka's is elsewhere and skipping would not do: no committed
// offset, or one past Resume. It reports whether the session must restart.
func (c *Consumer) moveOffset(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim, hc *hotlist.Claim) bool {
	start, resume := claim.InitialOffset(), hc.Resume()
	switch {
	case start >= 0 && start <= resume:
		return false // at Resume, or behind it: Add skips what Redis has
	case start > resume:
		s.ResetOffset(claim.Topic(), claim.Partition(), resume, "")
	case resume == 0:
		return false // nothing applied yet: start where the group's policy says
	default:
		s.MarkOffset(claim.Topic(), claim.Partition(), resume, "")
	}
	s.Commit()
	c.restarts.Add(1)
	c.report(fmt.Errorf("hotkafka: partition %d of %s starts at offset %d, Redis has applied up to %d: restarting there", claim.Partition(), claim.Topic(), start, resume-1))
	c.log.Info("hotkafka: partition restarts where Redis has applied up to", "topic", claim.Topic(), "partition", claim.Partition(),
		"kafka_offset", start, "resume", resume)
	return true
}

// flush flushes hc, retrying until it succeeds or the session ends, and marks
// the offset after what Redis has. False: stop consuming the partition.
func (c *Consumer) flush(s sarama.ConsumerGroupSession, hc *hotlist.Claim) bool {
	for attempt := 1; ; attempt++ {
		err := hc.Flush(s.Context())
		if err == nil {
			c.mark(s, hc)
			return true
		}
		c.report(err)
		if errors.Is(err, hotlist.ErrResync) || errors.Is(err, hotlist.ErrClosed) {
			c.restarts.Add(1)
			c.log.Warn("hotkafka: partition resyncs from its Redis offset", "topic", c.topic, "partition", hc.Partition(), "err", err)
			return false // a new session re-reads from the committed offset
		}
		if s.Context().Err() == nil {
			level := slog.LevelWarn
			if attempt > 1 { // one Warn per batch, not one per retry
				level = slog.LevelDebug
			}
			c.log.Log(s.Context(), level, "hotkafka: flush failed; retrying the same batch", "topic", c.topic, "partition", hc.Partition(),
				"attempt", attempt, "retry_in", c.cfg.RetryBackoff, "err", err)
		}
		select {
		case <-s.Context().Done():
			return false
		case <-time.After(c.cfg.RetryBackoff):
		}
	}
}

// release flushes what hc holds before the partition goes to another
// consumer; what it cannot flush in time that consumer reads again.
func (c *Consumer) release(s sarama.ConsumerGroupSession, hc *hotlist.Claim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.Context()), c.cfg.ReleaseTimeout)
	defer cancel()
	if err := hc.Release(ctx); err != nil {
		c.report(err)
		c.log.Warn("hotkafka: last flush of a released partition failed; its next owner re-reads it", "topic", c.topic, "partition", hc.Partition(), "err", err)
		return
	}
	c.mark(s, hc)
}

func (c *Consumer) mark(s sarama.ConsumerGroupSession, hc *hotlist.Claim) {
	if hc.Applied() >= 0 {
		s.MarkOffset(c.topic, hc.Partition(), hc.Applied()+1, "")
	}
}

func (c *Consumer) report(err error) {
	if c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
}
