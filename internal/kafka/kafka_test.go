package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/internal/kafka"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestKeyedProduceConsumeInOrder: a keyed sync producer and a consumer group
// deliver every message once, each key on one partition, in send order.
func TestKeyedProduceConsumeInOrder(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 4)
	const keys, perKey = 20, 50

	p, err := kafka.NewProducer(brokers, kafka.Config("smoke-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	partitionOf := map[string]int32{}
	for i := range perKey {
		var batch []kafka.Message
		for k := range keys {
			batch = append(batch, kafka.Message{Topic: topic, Key: fmt.Sprintf("k%d", k), Value: fmt.Appendf(nil, "%d", i)})
		}
		if i%2 == 0 { // exercise both paths
			if err := p.SendBatch(batch); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, m := range batch {
			part, _, err := p.Send(m)
			if err != nil {
				t.Fatal(err)
			}
			if prev, ok := partitionOf[m.Key]; ok && prev != part {
				t.Fatalf("key %s went to partitions %d and %d", m.Key, prev, part)
			}
			partitionOf[m.Key] = part
		}
	}
	if used := distinct(partitionOf); used < 2 {
		t.Fatalf("20 keys landed on %d partition(s); the hash partitioner is not spreading", used)
	}

	var mu sync.Mutex
	next := map[string]int{} // key → next expected sequence number
	seenPartition := map[string]int32{}
	total := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- kafka.Consume(ctx, brokers, "smoke-"+topic, []string{topic}, kafka.Config("smoke-consumer"),
			func(_ context.Context, m *sarama.ConsumerMessage) error {
				mu.Lock()
				defer mu.Unlock()
				key := string(m.Key)
				var seq int
				fmt.Sscan(string(m.Value), &seq)
				if seq != next[key] {
					t.Errorf("key %s: got seq %d, want %d (duplicate or out of order)", key, seq, next[key])
				}
				next[key] = seq + 1
				if p, ok := seenPartition[key]; ok && p != m.Partition {
					t.Errorf("key %s read from partitions %d and %d", key, p, m.Partition)
				}
				seenPartition[key] = m.Partition
				if total++; total == keys*perKey {
					cancel()
				}
				return nil
			})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if total != keys*perKey {
		t.Fatalf("consumed %d messages, want %d", total, keys*perKey)
	}
	for k := range keys {
		if got := next[fmt.Sprintf("k%d", k)]; got != perKey {
			t.Errorf("key k%d: consumed %d, want %d", k, got, perKey)
		}
	}
}

// TestHandlerErrorRedelivers: a message whose handler fails is retried, not
// skipped, and the next message waits for it.
func TestHandlerErrorRedelivers(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 1)
	p, err := kafka.NewProducer(brokers, kafka.Config("retry-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SendBatch([]kafka.Message{{Topic: topic, Key: "a", Value: []byte("1")}, {Topic: topic, Key: "a", Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	failures := 2
	kafka.Consume(ctx, brokers, "retry-"+topic, []string{topic}, kafka.Config("retry-consumer"),
		func(_ context.Context, m *sarama.ConsumerMessage) error {
			if string(m.Value) == "1" && failures > 0 {
				failures--
				return fmt.Errorf("transient")
			}
			got = append(got, string(m.Value))
			if len(got) == 2 {
				cancel()
			}
			return nil
		})
	if fmt.Sprint(got) != "[1 2]" || failures != 0 {
		t.Fatalf("handled %v with %d failures left, want [1 2] after 2 failures", got, failures)
	}
}

func TestCreateTopicTwiceIsFine(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 2)
	if err := kafka.CreateTopic(brokers, topic, 2); err != nil {
		t.Fatalf("second create: %v", err)
	}
}

func distinct(m map[string]int32) int {
	s := map[int32]bool{}
	for _, v := range m {
		s[v] = true
	}
	return len(s)
}
