package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
)

// A consumer's metrics through a scripted run on one partition: five
// messages, one poison (dead-lettered), one failing once — handler calls by
// outcome, the dead-letter publish, and the partition's lag while the last
// message is handled, exact; no partition is reported once the consumer
// let go of it.
func TestConsumerMetrics(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, dlq := testenv.Topic(t, 1), testenv.Topic(t, 1)
	pub := dial(t, brokers)
	publish(t, pub, topic, "a", "good", "a", "poison", "a", "flaky", "a", "good", "a", "last")
	reader := sdkmetric.NewManualReader()
	failed := false
	var lagAtLast map[string]float64
	c, err := kafka.ConsumeN(timeout(t), brokers, "metrics-"+topic, []string{topic}, 5,
		func(_ context.Context, _, value []byte) error {
			switch string(value) {
			case "poison":
				return fmt.Errorf("%w: %w", errBad, outbox.ErrPoison)
			case "flaky":
				if !failed {
					failed = true
					return errors.New("a transient failure")
				}
			case "last":
				lagAtLast = obstest.Points(t, reader)
			}
			return nil
		}, kafka.ConsumerConfig{DeadLetter: pub, DeadLetterTopic: dlq, RetryBackoff: 1,
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	if c.Handled() != 4 || c.Poisoned() != 1 {
		t.Fatalf("handled %d, poisoned %d", c.Handled(), c.Poisoned())
	}
	// Handling offset 4 of 5 (high-water mark 5), offset 3 settled: 1 behind.
	lag := "casebook.kafka.consumer.lag messaging.consumer.group.name=metrics-" + topic + ",messaging.destination.name=" + topic + ",messaging.destination.partition.id=0"
	if lagAtLast[lag] != 1 {
		t.Errorf("while handling the last message %s = %v (all: %v), want 1", lag, lagAtLast[lag], lagAtLast)
	}
	got := obstest.Points(t, reader)
	want := map[string]float64{
		"casebook.kafka.operations casebook.operation=handle,casebook.outcome=ok":                                     4,
		"casebook.kafka.operations casebook.operation=handle,casebook.outcome=refused,casebook.reason=poison":         1,
		"casebook.kafka.operations casebook.operation=handle,casebook.outcome=error":                                  1,
		"casebook.kafka.operations casebook.operation=dead_letter,casebook.outcome=ok":                                1,
		"casebook.kafka.operation.duration casebook.operation=handle,casebook.outcome=ok":                             4,
		"casebook.kafka.operation.duration casebook.operation=handle,casebook.outcome=refused,casebook.reason=poison": 1,
		"casebook.kafka.operation.duration casebook.operation=handle,casebook.outcome=error":                          1,
		"casebook.kafka.operation.duration casebook.operation=dead_letter,casebook.outcome=ok":                        1,
	}
	obstest.Expect(t, got, want)
}

// A group with no committed offset starts from a policy, not an offset
// (sarama's InitialOffset is OffsetOldest): before its first message a
// partition is behind by all it holds — an empty one by nothing — and the
// lag carries the group's name, so two groups on one topic are two series.
func TestConsumerLagFromNoCommittedOffset(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 2)
	pub := dial(t, brokers)
	publish(t, pub, topic, "k", "1", "k", "2", "k", "3") // one key: one partition
	reader := sdkmetric.NewManualReader()
	group := "lag-" + topic
	series := func(p int) string {
		return "casebook.kafka.consumer.lag messaging.consumer.group.name=" + group + ",messaging.destination.name=" + topic +
			",messaging.destination.partition.id=" + strconv.Itoa(p)
	}
	var atFirst map[string]float64
	_, err := kafka.ConsumeN(timeout(t), brokers, group, []string{topic}, 3, func(context.Context, []byte, []byte) error {
		if atFirst == nil {
			testenv.WaitFor(t, "both partitions claimed", func() bool {
				atFirst = obstest.Points(t, reader)
				_, a := atFirst[series(0)]
				_, b := atFirst[series(1)]
				return a && b
			})
		}
		return nil
	}, kafka.ConsumerConfig{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	lags := []float64{atFirst[series(0)], atFirst[series(1)]}
	slices.Sort(lags)
	if lags[0] != 0 || lags[1] != 3 {
		t.Fatalf("lags while the first message is handled: %v (all: %v), want the empty partition 0 and the other 3", lags, atFirst)
	}
}
