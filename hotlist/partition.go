package hotlist

import (
	"fmt"

	"github.com/casebook-dev/casebook/outbox"
)

// PartitionOf returns the partition, of n, that a Kafka message keyed by
// item goes to under sarama's hash partitioner — the casebook/kafka default:
// FNV-1a 32 of the key as a signed int32, modulo n, negated when negative.
// An aggregator rejects events whose item is not on its partition
// (ErrWrongPartition), so that an item's heat never straddles two
// partitions and the global top is an exact merge of theirs.
func PartitionOf[S string | []byte](item S, n int) int32 {
	h := uint32(2166136261)
	for i := 0; i < len(item); i++ {
		h ^= uint32(item[i])
		h *= 16777619
	}
	p := int32(h) % int32(n)
	if p < 0 {
		p = -p
	}
	return p
}

// EncodeMessages groups events by partition (PartitionOf) and encodes each
// group as batches of at most perMessage events (0: MaxBatchEvents), in the
// events' order. Each message is keyed by the first item of its batch, so a
// hash-partitioning producer (casebook/kafka's Publisher) delivers it to the
// partition of every item in it.
func EncodeMessages(topic string, partitions, perMessage int, events []Event) ([]outbox.Message, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("%w: %d partitions", ErrConfig, partitions)
	}
	if perMessage <= 0 || perMessage > MaxBatchEvents {
		perMessage = MaxBatchEvents
	}
	groups := make(map[int32][]Event)
	var order []int32
	for _, e := range events {
		p := PartitionOf(e.Item, partitions)
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], e)
	}
	var msgs []outbox.Message
	for _, p := range order {
		g := groups[p]
		for len(g) > 0 {
			n := min(len(g), perMessage)
			value, err := AppendBatch(nil, g[:n])
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, outbox.Message{Topic: topic, Key: []byte(g[0].Item), Value: value})
			g = g[n:]
		}
	}
	return msgs, nil
}
