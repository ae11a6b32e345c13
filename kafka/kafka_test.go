package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func dial(t *testing.T, brokers []string) *kafka.Publisher {
	t.Helper()
	p, err := kafka.Dial(brokers, "test-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func publish(t *testing.T, p outbox.Publisher, topic string, kv ...string) {
	t.Helper()
	var msgs []outbox.Message
	for i := 0; i < len(kv); i += 2 {
		msgs = append(msgs, outbox.Message{Topic: topic, Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	if err := p.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestKeyedProduceConsumeInOrder: keys spread over partitions, each key stays
// on one partition, and the consumer sees every message once, in send order.
func TestKeyedProduceConsumeInOrder(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 4)
	const keys, perKey = 20, 50

	sp, err := sarama.NewSyncProducer(brokers, kafka.Config("order-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	partitionOf := map[string]int32{}
	for k := range keys { // one message per key through sarama, to see its partition
		key := fmt.Sprintf("k%d", k)
		part, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("0")})
		if err != nil {
			t.Fatal(err)
		}
		partitionOf[key] = part
	}
	if used := distinct(partitionOf); used < 2 {
		t.Fatalf("20 keys landed on %d partition(s); the hash partitioner is not spreading", used)
	}
	p := kafka.NewPublisher(sp)
	for i := 1; i < perKey; i++ {
		var kv []string
		for k := range keys {
			kv = append(kv, fmt.Sprintf("k%d", k), strconv.Itoa(i))
		}
		publish(t, p, topic, kv...)
	}

	var mu sync.Mutex
	next := map[string]int{} // key → next expected sequence number
	c, err := kafka.ConsumeN(timeout(t), brokers, "order-"+topic, []string{topic}, keys*perKey,
		func(_ context.Context, key, value []byte) error {
			mu.Lock()
			defer mu.Unlock()
			seq, _ := strconv.Atoi(string(value))
			if seq != next[string(key)] {
				t.Errorf("key %s: got seq %d, want %d (duplicate or out of order)", key, seq, next[string(key)])
			}
			next[string(key)] = seq + 1
			return nil
		}, kafka.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Handled() != keys*perKey {
		t.Fatalf("consumed %d messages, want %d", c.Handled(), keys*perKey)
	}
	for k := range keys {
		if got := next[fmt.Sprintf("k%d", k)]; got != perKey {
			t.Errorf("key k%d: consumed %d, want %d", k, got, perKey)
		}
	}
}

// TestTransientErrorRedelivers: a message whose handler fails transiently is
// retried, not skipped, and the next message of its partition waits for it.
func TestTransientErrorRedelivers(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 1)
	publish(t, dial(t, brokers), topic, "a", "1", "a", "2")
	var got []string
	failures := 2
	logs := obstest.NewLogs()
	c, err := kafka.ConsumeN(timeout(t), brokers, "retry-"+topic, []string{topic}, 2,
		func(_ context.Context, _, value []byte) error {
			if string(value) == "1" && failures > 0 {
				failures--
				return errors.New("transient")
			}
			got = append(got, string(value))
			return nil
		}, kafka.ConsumerConfig{RetryBackoff: time.Millisecond, Logger: logs.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 2]" || failures != 0 || c.Poisoned() != 0 {
		t.Fatalf("handled %v with %d failures left and %d poisoned, want [1 2] after 2 failures", got, failures, c.Poisoned())
	}
	// One Warn for the message, its second failure at Debug.
	want := fmt.Sprintf("casebook.block=kafka topic=%s partition=0 offset=0 attempt=%%d retry_in=1ms err=transient", topic)
	if lines := logs.Lines(); fmt.Sprint(lines) != fmt.Sprint([]string{
		"WARN kafka: message not settled; retrying it " + fmt.Sprintf(want, 1),
		"DEBUG kafka: message not settled; retrying it " + fmt.Sprintf(want, 2),
	}) {
		t.Fatalf("logged %q", lines)
	}
}

var errBad = errors.New("test: bad message")

// TestPoisonIsDeadLetteredAndSkipped: a poison message goes to the dead-letter
// topic, is counted, and the messages behind it on its partition are handled.
func TestPoisonIsDeadLetteredAndSkipped(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, dlq := testenv.Topic(t, 1), testenv.Topic(t, 1)
	pub := dial(t, brokers)
	publish(t, pub, topic, "a", "good-1", "a", "poison", "a", "good-2", "a", "good-3")
	var got []string
	var told []string
	logs := obstest.NewLogs()
	c, err := kafka.ConsumeN(timeout(t), brokers, "poison-"+topic, []string{topic}, 4,
		func(_ context.Context, _, value []byte) error {
			if string(value) == "poison" {
				return fmt.Errorf("%w: %w", errBad, outbox.ErrPoison)
			}
			got = append(got, string(value))
			return nil
		}, kafka.ConsumerConfig{DeadLetter: pub, DeadLetterTopic: dlq, Logger: logs.Logger, OnPoison: func(_ string, _ int32, offset int64, err error) {
			told = append(told, fmt.Sprintf("%d %v", offset, errors.Is(err, errBad)))
		}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[good-1 good-2 good-3]" || c.Poisoned() != 1 || c.Handled() != 3 {
		t.Fatalf("handled %v (%d), poisoned %d; want the three good ones and one poisoned", got, c.Handled(), c.Poisoned())
	}
	if fmt.Sprint(told) != "[1 true]" {
		t.Fatalf("OnPoison told %v, want offset 1 with the handler's error", told)
	}
	if lines, want := logs.Lines(), fmt.Sprintf("WARN kafka: poison message dead-lettered casebook.block=kafka topic=%s partition=0 offset=1 dead_letter_topic=%s err=%v",
		topic, dlq, fmt.Errorf("%w: %w", errBad, outbox.ErrPoison)); fmt.Sprint(lines) != fmt.Sprint([]string{want}) {
		t.Fatalf("logged %q, want %q", lines, want)
	}
	var dead []string
	if _, err := kafka.ConsumeN(timeout(t), brokers, "dlq-"+dlq, []string{dlq}, 1, func(_ context.Context, key, value []byte) error {
		dead = append(dead, string(key)+"="+string(value))
		return nil
	}, kafka.ConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(dead) != "[a=poison]" {
		t.Fatalf("dead-letter topic holds %v, want [a=poison]", dead)
	}
}

func TestConsumerConfigValidated(t *testing.T) {
	h := func(context.Context, []byte, []byte) error { return nil }
	for name, cfg := range map[string]kafka.ConsumerConfig{
		"dead letter without topic": {DeadLetter: kafka.NewPublisher(nil)},
		"topic without publisher":   {DeadLetterTopic: "dlq"},
		"negative backoff":          {RetryBackoff: -time.Second},
	} {
		if _, err := kafka.NewConsumer(nil, []string{"t"}, h, cfg); !errors.Is(err, kafka.ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
	if _, err := kafka.NewConsumer(nil, nil, h, kafka.ConsumerConfig{}); !errors.Is(err, kafka.ErrConfig) {
		t.Errorf("no topics: got %v, want ErrConfig", err)
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

// TestAsyncPublisher: concurrent batches through one AsyncProducer each
// return after their own acknowledgements, every message arrives once, and a
// message the producer refuses fails its batch.
func TestAsyncPublisher(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 4)
	ap, err := sarama.NewAsyncProducer(brokers, kafka.Config("async-"+topic))
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	pub := kafka.NewAsyncPublisher(ap)
	const writers, batches, size = 4, 10, 5
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				var msgs []outbox.Message
				for i := range size {
					msgs = append(msgs, outbox.Message{Topic: topic, Key: []byte(fmt.Sprint(w)), Value: []byte(fmt.Sprint(w, "-", b, "-", i))})
				}
				if err := pub.Publish(timeout(t), msgs); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	seen := map[string]int{}
	c, err := kafka.ConsumeN(timeout(t), brokers, "async-"+topic, []string{topic}, writers*batches*size, func(_ context.Context, _, v []byte) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(v)]++
		return nil
	}, kafka.ConsumerConfig{})
	if err != nil || c.Handled() != writers*batches*size || len(seen) != writers*batches*size {
		t.Fatalf("handled %d, %d distinct of %d: %v", c.Handled(), len(seen), writers*batches*size, err)
	}
	huge := make([]byte, 2<<20) // over Producer.MaxMessageBytes
	err = pub.Publish(timeout(t), []outbox.Message{{Topic: topic, Key: []byte("k"), Value: []byte("fine")}, {Topic: topic, Key: []byte("k"), Value: huge}})
	var refused sarama.ConfigurationError
	if !errors.As(err, &refused) {
		t.Fatalf("a batch with a message the producer refuses: %v, want sarama's refusal", err)
	}
}
