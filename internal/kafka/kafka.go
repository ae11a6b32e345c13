// Package kafka is casebook's thin layer over IBM/sarama: one configuration
// for every block, a synchronous keyed producer and an at-least-once consumer
// group loop.
//
// Ordering: messages with the same key go to the same partition (sarama's
// hash partitioner), so per-entity order holds from producer to consumer.
// Delivery: at-least-once. The producer is idempotent (no duplicates from its
// own retries), but a consumer may see a message again after a crash or a
// rebalance, so every handler in casebook is idempotent on the SQL side.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
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
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Producer.Retry.Max = 5
	c.Producer.Retry.Backoff = 50 * time.Millisecond
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	c.Metadata.Retry.Backoff = 50 * time.Millisecond
	return c
}

// Message is one record to produce.
type Message struct {
	Topic string
	Key   string
	Value []byte
}

// Producer sends messages and returns only once the brokers acknowledged
// them. It is safe for concurrent use.
type Producer struct {
	p sarama.SyncProducer
}

// NewProducer connects a producer to brokers.
func NewProducer(brokers []string, cfg *sarama.Config) (*Producer, error) {
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka: new producer: %w", err)
	}
	return &Producer{p: p}, nil
}

// Send produces one message and waits for its acknowledgement.
func (p *Producer) Send(m Message) (partition int32, offset int64, err error) {
	partition, offset, err = p.p.SendMessage(toSarama(m))
	if err != nil {
		return 0, 0, fmt.Errorf("kafka: send to %s: %w", m.Topic, err)
	}
	return partition, offset, nil
}

// SendBatch produces messages and waits until every one is acknowledged. On
// error some messages may have been written: callers retry the whole batch and
// rely on idempotent consumers.
func (p *Producer) SendBatch(ms []Message) error {
	if len(ms) == 0 {
		return nil
	}
	batch := make([]*sarama.ProducerMessage, len(ms))
	for i, m := range ms {
		batch[i] = toSarama(m)
	}
	if err := p.p.SendMessages(batch); err != nil {
		return fmt.Errorf("kafka: send batch of %d: %w", len(ms), err)
	}
	return nil
}

// Close flushes and closes the producer.
func (p *Producer) Close() error { return p.p.Close() }

func toSarama(m Message) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: m.Topic, Key: sarama.StringEncoder(m.Key), Value: sarama.ByteEncoder(m.Value)}
}

// Handler processes one message. Returning nil commits it; returning an error
// makes Consume retry the same message (after a short pause) until it
// succeeds or the context ends, so later messages of its partition wait.
type Handler func(ctx context.Context, m *sarama.ConsumerMessage) error

// Consume joins group on topics and calls h for every message, in order within
// a partition, until ctx is cancelled. It returns nil on cancellation.
func Consume(ctx context.Context, brokers []string, group string, topics []string, cfg *sarama.Config, h Handler) error {
	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		return fmt.Errorf("kafka: join group %s: %w", group, err)
	}
	defer cg.Close()
	gh := groupHandler{h: h}
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, topics, gh); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return nil
			}
			select { // a rebalance or a broker hiccup: rejoin after a pause
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// ConsumeN is Consume until h has succeeded n times or ctx ends; it returns
// how many messages were handled. Tests and batch jobs use it to read what
// they know was produced.
func ConsumeN(ctx context.Context, brokers []string, group string, topics []string, cfg *sarama.Config, n int64, h Handler) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handled atomic.Int64
	err := Consume(ctx, brokers, group, topics, cfg, func(ctx context.Context, m *sarama.ConsumerMessage) error {
		if err := h(ctx, m); err != nil {
			return err
		}
		if handled.Add(1) >= n {
			cancel()
		}
		return nil
	})
	return handled.Load(), err
}

type groupHandler struct{ h Handler }

func (groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (g groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			for {
				err := g.h(s.Context(), m)
				if err == nil {
					break
				}
				select {
				case <-s.Context().Done():
					return nil // not marked: redelivered to the next owner
				case <-time.After(100 * time.Millisecond):
				}
			}
			s.MarkMessage(m, "")
		case <-s.Context().Done():
			return nil
		}
	}
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
