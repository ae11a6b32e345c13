// Package kafka runs casebook's event flows on Kafka through IBM/sarama: one
// producer configuration for every block, an outbox.Publisher over a sarama
// producer, and a consumer-group loop that feeds blocks' outbox.Handlers and
// never lets a poison message block its partition.
//
// Only services that use Kafka import this package; the blocks themselves
// speak outbox.Message and outbox.Handler and link no Kafka client.
//
// Ordering: messages with the same key go to the same partition (sarama's
// hash partitioner), so per-entity order holds from producer to consumer.
// Delivery: at-least-once. The producer is idempotent (no duplicates from its
// own retries), but a consumer may see a message again after a crash or a
// rebalance, so every casebook handler is idempotent.
//
// Observability: a Consumer emits OpenTelemetry metrics and spans
// (ConsumerConfig.MeterProvider/TracerProvider, by default the global ones,
// free while none is installed):
//
//	casebook.kafka.operation.duration  histogram (s)  casebook.operation, casebook.outcome, casebook.reason
//	casebook.kafka.operations          counter        the same
//	casebook.kafka.consumer.lag        gauge (messages) per claimed partition (messaging.consumer.group.name when ConsumerConfig.Group
//	                                                 is set, messaging.destination.name, messaging.destination.partition.id):
//	                                                 the partition's high-water mark − the last settled offset − 1, read at collection
//
// A partition claimed with no committed offset starts where the group's
// policy says (sarama.OffsetOldest with Config): until its first message
// arrives its lag is its high-water mark (taken to start at offset 0: an
// upper bound once retention deleted some), 0 under OffsetNewest.
//
// Operations: handle (one handler call: ok; refused with reason poison, the
// message then skipped or dead-lettered; error, a transient failure retried —
// each retry counts again) and dead_letter (one dead-letter publish). Each
// is a span "kafka.<operation>"; a handler's spans nest under handle.
package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

// Version is the protocol version casebook speaks; Kafka 3.x brokers and
// franz-go's kfake accept it.
var Version = sarama.V3_6_0_0

// Config returns the sarama configuration casebook uses: acks from all
// in-sync replicas, idempotent keyed production, consumer groups starting at
// the oldest offset when they have none committed.
func Config(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = clientID
	c.Version = Version
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1 // required by the idempotent producer
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Producer.Retry.Max = 5
	c.Producer.Retry.Backoff = 50 * time.Millisecond
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	c.Metadata.Retry.Backoff = 50 * time.Millisecond
	return c
}

// Publisher is an outbox.Publisher over a sarama SyncProducer: Publish returns
// once the brokers acknowledged every message. It is safe for concurrent use.
type Publisher struct {
	p     sarama.SyncProducer
	owned bool
}

// NewPublisher publishes through p, which the caller keeps and closes.
func NewPublisher(p sarama.SyncProducer) *Publisher { return &Publisher{p: p} }

// Dial connects a producer with Config(clientID) to brokers; Close closes it.
func Dial(brokers []string, clientID string) (*Publisher, error) {
	p, err := sarama.NewSyncProducer(brokers, Config(clientID))
	if err != nil {
		return nil, fmt.Errorf("kafka: new producer: %w", err)
	}
	return &Publisher{p: p, owned: true}, nil
}

// Publish produces msgs and waits until every one is acknowledged. On error
// some may have been written: callers retry the whole batch and rely on
// idempotent consumers.
func (p *Publisher) Publish(_ context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	batch := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		batch[i] = &sarama.ProducerMessage{Topic: m.Topic, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value)}
	}
	if err := p.p.SendMessages(batch); err != nil {
		return fmt.Errorf("kafka: publish %d messages: %w", len(msgs), err)
	}
	return nil
}

// Close closes the producer if Dial opened it; a producer passed to
// NewPublisher is the caller's to close.
func (p *Publisher) Close() error {
	if !p.owned {
		return nil
	}
	p.owned = false
	return p.p.Close()
}

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// DeadLetter, when set, receives every poison message (same key and
	// value) on DeadLetterTopic before the consumer moves past it. Nil: poison
	// messages are counted and skipped.
	DeadLetter      outbox.Publisher
	DeadLetterTopic string
	// OnPoison, when set, is told of each poison message (for a log line).
	OnPoison func(topic string, partition int32, offset int64, err error)
	// RetryBackoff is the pause before a message whose handler failed with a
	// transient error is tried again. Default 100ms.
	RetryBackoff time.Duration
	// Group is the consumer group's id, for the lag gauge's
	// messaging.consumer.group.name attribute (a sarama.ConsumerGroup does
	// not tell it). Set it when two groups in one process read the same
	// topic: without it their lag series are one.
	Group string
	// MeterProvider and TracerProvider receive the consumer's metrics and
	// spans (see the package documentation); nil: OpenTelemetry's global
	// providers, which cost nothing while none is installed.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Logger, when set, hears of the consumer's background work: a poison
	// message skipped or dead-lettered, a handler's transient failure (at
	// Warn for a message's first, Debug for its retries), a failed
	// dead-letter publish, the group rejoining after an error. Nil: silent.
	Logger *slog.Logger
}

// ErrConfig reports an invalid ConsumerConfig.
var ErrConfig = errors.New("kafka: invalid config")

// Consumer feeds the messages of a consumer group to an outbox.Handler, in
// order within a partition. A message is committed once its handler returned
// nil or it was found poison (and dead-lettered, when configured); a
// transient error retries the same message, so later messages of that
// partition wait for it.
type Consumer struct {
	group    sarama.ConsumerGroup
	topics   []string
	h        outbox.Handler
	cfg      ConsumerConfig
	handled  atomic.Int64
	poisoned atomic.Int64
	obs      *instruments
	log      *slog.Logger
}

// NewConsumer consumes topics through group (which the caller closes).
func NewConsumer(group sarama.ConsumerGroup, topics []string, h outbox.Handler, cfg ConsumerConfig) (*Consumer, error) {
	if len(topics) == 0 || h == nil {
		return nil, fmt.Errorf("%w: topics and a handler are required", ErrConfig)
	}
	if (cfg.DeadLetter == nil) != (cfg.DeadLetterTopic == "") {
		return nil, fmt.Errorf("%w: DeadLetter and DeadLetterTopic go together", ErrConfig)
	}
	if cfg.RetryBackoff < 0 {
		return nil, fmt.Errorf("%w: RetryBackoff %v is negative", ErrConfig, cfg.RetryBackoff)
	}
	cfg.RetryBackoff = cmp.Or(cfg.RetryBackoff, 100*time.Millisecond)
	return &Consumer{group: group, topics: topics, h: h, cfg: cfg, obs: newInstruments(cfg.Group, cfg.MeterProvider, cfg.TracerProvider),
		log: obs.Logger(cfg.Logger, "kafka")}, nil
}

// Close stops the consumer's lag gauge from being collected; safe to call
// twice. The group is the caller's to close.
func (c *Consumer) Close() error { return c.obs.close() }

// Handled counts messages applied; Poisoned counts messages skipped or
// dead-lettered as poison.
func (c *Consumer) Handled() int64  { return c.handled.Load() }
func (c *Consumer) Poisoned() int64 { return c.poisoned.Load() }

// Run consumes until ctx ends (returning nil) or the group is closed.
// Rebalances and broker hiccups rejoin after a pause.
func (c *Consumer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := c.group.Consume(ctx, c.topics, c); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return nil
			}
			if ctx.Err() == nil {
				c.log.Warn("kafka: consume failed; rejoining the group", "topics", c.topics, "retry_in", c.cfg.RetryBackoff, "err", err)
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

// ConsumeClaim implements sarama.ConsumerGroupHandler.
func (c *Consumer) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	held := c.obs.claim(claim)
	defer c.obs.release(claim)
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			held.received(m.Offset)
			if !c.settle(s.Context(), m) {
				return nil // not marked: redelivered to the next owner
			}
			s.MarkMessage(m, "")
			held.settled.Store(m.Offset)
		case <-s.Context().Done():
			return nil
		}
	}
}

// settle handles m until it is applied or found poison; false means the
// session ended first.
func (c *Consumer) settle(ctx context.Context, m *sarama.ConsumerMessage) bool {
	for attempt := 1; ; attempt++ {
		hctx, call := c.obs.handle.Start(ctx)
		err := call.End(c.h(hctx, m.Key, m.Value))
		if err == nil {
			c.handled.Add(1)
			return true
		}
		if errors.Is(err, outbox.ErrPoison) {
			if err = c.deadLetter(ctx, m, err); err == nil {
				c.poisoned.Add(1)
				return true
			}
		}
		if ctx.Err() != nil {
			return false
		}
		level := slog.LevelWarn
		if attempt > 1 { // one Warn per message, not one per retry
			level = slog.LevelDebug
		}
		c.log.Log(ctx, level, "kafka: message not settled; retrying it", "topic", m.Topic, "partition", m.Partition,
			"offset", m.Offset, "attempt", attempt, "retry_in", c.cfg.RetryBackoff, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.cfg.RetryBackoff):
		}
	}
}

func (c *Consumer) deadLetter(ctx context.Context, m *sarama.ConsumerMessage, cause error) error {
	if c.cfg.OnPoison != nil {
		c.cfg.OnPoison(m.Topic, m.Partition, m.Offset, cause)
	}
	if c.cfg.DeadLetter == nil {
		c.log.Warn("kafka: poison message skipped", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "err", cause)
		return nil
	}
	ctx, call := c.obs.deadLetter.Start(ctx)
	err := call.End(c.cfg.DeadLetter.Publish(ctx, []outbox.Message{{Topic: c.cfg.DeadLetterTopic, Key: m.Key, Value: m.Value}}))
	if err != nil {
		return fmt.Errorf("kafka: dead-letter to %s: %w", c.cfg.DeadLetterTopic, err)
	}
	c.log.Warn("kafka: poison message dead-lettered", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset,
		"dead_letter_topic", c.cfg.DeadLetterTopic, "err", cause)
	return nil
}

// ConsumeN joins groupID on topics with Config and runs h until n messages
// were settled (applied or poison) or ctx ends — an error, then, naming how
// many were; it returns the consumer, closed, for its counts. Tests and
// batch jobs use it to read what they know was produced. cfg.Group
// defaults to groupID.
func ConsumeN(ctx context.Context, brokers []string, groupID string, topics []string, n int64, h outbox.Handler, cfg ConsumerConfig) (*Consumer, error) {
	group, err := sarama.NewConsumerGroup(brokers, groupID, Config(groupID))
	if err != nil {
		return nil, fmt.Errorf("kafka: join group %s: %w", groupID, err)
	}
	defer group.Close()
	cfg.Group = cmp.Or(cfg.Group, groupID)
	c, err := NewConsumer(group, topics, h, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.Handled()+c.Poisoned() < n {
		select {
		case err := <-done:
			if err == nil && c.Handled()+c.Poisoned() < n {
				err = fmt.Errorf("kafka: %s settled %d of %d messages: %w", groupID, c.Handled()+c.Poisoned(), n, context.Cause(ctx))
			}
			return c, err
		case <-tick.C:
		}
	}
	cancel()
	return c, <-done
}

// CreateTopic creates topic with the given partitions (replication 1, which
// any cluster size accepts). An existing topic is not an error.
func CreateTopic(brokers []string, topic string, partitions int32) error {
	admin, err := sarama.NewClusterAdmin(brokers, Config("casebook-admin"))
	if err != nil {
		return fmt.Errorf("kafka: admin: %w", err)
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("kafka: create topic %s: %w", topic, err)
	}
	return nil
}

// DeleteTopic removes topic.
func DeleteTopic(brokers []string, topic string) error {
	admin, err := sarama.NewClusterAdmin(brokers, Config("casebook-admin"))
	if err != nil {
		return fmt.Errorf("kafka: admin: %w", err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(topic); err != nil {
		return fmt.Errorf("kafka: delete topic %s: %w", topic, err)
	}
	return nil
}
