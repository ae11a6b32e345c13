package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

// Workers is everything that runs behind the API: the relays from the
// gate's Redis outboxes and the order block's SQL outbox to Kafka, the
// throttled consumer that writes the orders (the seed's peak shaving), the
// consumers of order events (the gate's restock, fulfilment), the timeouts
// and the active query of the payment channel.
type Workers struct {
	shop    *Shop
	sale    *seckill.Sale
	brokers []string
	pub     outbox.Publisher
	channel order.Channel
	cfg     WorkerConfig

	ordersTopic, eventsTopic string

	relayed  atomic.Int64 // orders relayed to Kafka (in messages of many)
	written  atomic.Int64 // orders the throttled consumer wrote
	shipped  atomic.Int64
	events   atomic.Int64 // order events the gate handled
	released atomic.Int64 // units returned by ReleaseDue
	recover  atomic.Int64 // payments the active query resolved
	repairs  atomic.Int64 // gate repairs from SQL after Redis lost state

	joined sync.WaitGroup // one per consumer group, done at its first ping
	poison atomic.Int64
	errs   atomic.Int64
}

// WorkerConfig sizes the workers.
type WorkerConfig struct {
	WriteRate int           // orders/s the order consumer writes [2,000, the seed's]
	Tick      time.Duration // how often relays, timeouts and the active query run [100ms]
	// QueryWithin is how close to its deadline an unpaid order's payment
	// is queried at the channel.
	QueryWithin time.Duration
}

// Run runs every worker until ctx ends.
func (w *Workers) Run(ctx context.Context) error {
	if w.cfg.WriteRate == 0 {
		w.cfg.WriteRate = 2000
	}
	if w.cfg.Tick == 0 {
		w.cfg.Tick = 100 * time.Millisecond
	}
	var wg sync.WaitGroup
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			w.errs.Add(1)
			log.Print(err)
		}
	}
	// The gate's outbox streams → Kafka, counting the orders they carry.
	relay := outbox.NewRelay(w.shop.rdb, w.sale.Outboxes(), w.ordersTopic, countingPublisher{w.pub, &w.relayed},
		outbox.WithMeterProvider(w.shop.tel.mp))
	wg.Go(func() { relay.Run(ctx, w.cfg.Tick/2, fail) })

	// Kafka → orders, throttled to WriteRate orders/s.
	pace := newPacer(w.cfg.WriteRate)
	createOrders := func(ctx context.Context, key, value []byte) error {
		m, err := seckill.DecodeOrderMessage(value)
		if err == nil {
			if err := pace.wait(ctx, len(m.Orders)); err != nil {
				return err
			}
		}
		if err := w.shop.gate.HandleOrder(ctx, key, value); err != nil {
			return err
		}
		w.written.Add(int64(len(m.Orders)))
		return nil
	}
	// The order block's outbox → Kafka.
	wg.Go(func() {
		every(ctx, w.cfg.Tick/2, func() {
			if _, err := w.shop.orders.RelayOutbox(ctx, w.pub, w.eventsTopic, 500); err != nil {
				fail(err)
			}
		})
	})
	// Order events → the gate (a closed order's units and quota back to
	// Redis at once) and fulfilment (a paid order ships).
	fulfil := func(ctx context.Context, _, value []byte) error {
		e, err := order.DecodeEvent(value)
		if err != nil {
			return outbox.Poison(err)
		}
		if e.Kind != order.EventStatus || e.To != order.Paid {
			return nil
		}
		_, err = w.shop.orders.Ship(ctx, e.OrderID)
		if errors.Is(err, order.ErrIllegalTransition) { // shipped before: a redelivery
			return nil
		}
		if err == nil {
			w.shipped.Add(1)
		}
		return err
	}
	restock := func(ctx context.Context, key, value []byte) error {
		err := w.shop.gate.HandleOrderEvent(ctx, key, value)
		if err == nil {
			w.events.Add(1)
		}
		return err
	}
	for _, c := range []struct {
		group, topic string
		h            outbox.Handler
	}{
		{"shop-orders", w.ordersTopic, createOrders},
		{"shop-gate", w.eventsTopic, restock},
		{"shop-fulfilment", w.eventsTopic, fulfil},
	} {
		c.h = w.answersPing(c.h)
		group, err := sarama.NewConsumerGroup(w.brokers, c.group+"-"+w.shop.ns, kafka.Config(c.group))
		if err != nil {
			return err
		}
		defer group.Close()
		cons, err := kafka.NewConsumer(group, []string{c.topic}, c.h, kafka.ConsumerConfig{
			Group: c.group, MeterProvider: w.shop.tel.mp,
			OnPoison: func(topic string, part int32, off int64, err error) {
				w.poison.Add(1)
				log.Printf("poison message %s/%d@%d skipped: %v", topic, part, off, err)
			},
		})
		if err != nil {
			return err
		}
		wg.Go(func() { fail(cons.Run(ctx)) })
	}
	// Timeouts: lapsed reservations settled (their orders expired first),
	// the order block's own delay queues, and its sweeper as the backstop.
	{
		sweep := time.Now()
		wg.Go(func() {
			every(ctx, w.cfg.Tick, func() {
				n, err := w.sale.ReleaseDue(ctx)
				w.released.Add(int64(n))
				fail(err)
				_, err = w.shop.orders.RunDue(ctx, 1000)
				fail(err)
				if time.Since(sweep) > 10*w.cfg.Tick {
					_, err = w.shop.orders.Sweep(ctx, 1000)
					fail(err)
					sweep = time.Now()
				}
			})
		})
	}
	// The gate's reconciliation: a difference between Redis and SQL seen
	// twice in a row, with the order consumer caught up, is a loss (a
	// failover, a restart) and is repaired from SQL. Stale reservations
	// (closed orders whose release is on its way: events and ReleaseDue lag
	// under load) with no other difference are not a loss.
	{
		seen := false
		wg.Go(func() {
			every(ctx, w.cfg.Tick*10, func() {
				if w.Backlog() == 0 {
					rep, err := w.sale.Reconcile(ctx, false)
					fail(err)
					settling := rep.Stale > 0 && rep.LostBuckets == 0 && rep.Missing == 0 && rep.ShortQuotas == 0
					switch {
					case err != nil || rep.OK() || settling:
						seen = false
					case seen:
						rep, err = w.sale.Reconcile(ctx, true)
						fail(err)
						if rep.Repaired {
							w.repairs.Add(1)
							log.Printf("gate repaired from SQL: %+v", rep)
						}
						seen = false
					default:
						seen = true
					}
				}
			})
		})
	}
	// The active query: lost callbacks found by asking the channel about
	// payments still waiting near their order's deadline.
	wg.Go(func() {
		every(ctx, w.cfg.Tick*5, func() {
			n, err := w.shop.orders.RecoverPayments(ctx, w.channel, w.cfg.QueryWithin, 500)
			w.recover.Add(int64(n))
			fail(err)
		})
	})
	wg.Wait()
	return nil
}

// pingKey marks the message Ready sends through each topic: a consumer
// that sees it has joined its group and reads.
const pingKey = "casebook-shop-ping"

// answersPing has h mark its group joined at the first ping, and skip pings.
func (w *Workers) answersPing(h outbox.Handler) outbox.Handler {
	var once sync.Once
	return func(ctx context.Context, key, value []byte) error {
		if string(key) == pingKey {
			once.Do(w.joined.Done)
			return nil
		}
		return h(ctx, key, value)
	}
}

// Ready sends a ping through both topics and waits until every consumer
// group read it: a group joins (and a rebalance settles) in seconds, and a
// sale must not start with nobody reading its orders.
func (w *Workers) Ready(ctx context.Context) error {
	msgs := []outbox.Message{{Topic: w.ordersTopic, Key: []byte(pingKey)}, {Topic: w.eventsTopic, Key: []byte(pingKey)}}
	if err := w.pub.Publish(ctx, msgs); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { w.joined.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shop: consumers did not join: %w", ctx.Err())
	}
}

// Backlog is how many orders wait in Kafka for the throttled consumer.
func (w *Workers) Backlog() int64 { return w.relayed.Load() - w.written.Load() }

func (w *Workers) String() string {
	return fmt.Sprintf("relayed %d orders, written %d (backlog %d), shipped %d, released %d units, %d payments recovered by query, %d gate repairs, %d poison, %d errors",
		w.relayed.Load(), w.written.Load(), w.Backlog(), w.shipped.Load(), w.released.Load(), w.recover.Load(), w.repairs.Load(), w.poison.Load(), w.errs.Load())
}

// countingPublisher counts the orders in the gate's messages it publishes.
type countingPublisher struct {
	outbox.Publisher
	n *atomic.Int64
}

func (p countingPublisher) Publish(ctx context.Context, ms []outbox.Message) error {
	if err := p.Publisher.Publish(ctx, ms); err != nil {
		return err
	}
	for _, m := range ms {
		if om, err := seckill.DecodeOrderMessage(m.Value); err == nil {
			p.n.Add(int64(len(om.Orders)))
		}
	}
	return nil
}

// pacer lets through at most rate units per second on average, with bursts
// of a tenth of a second.
type pacer struct {
	mu   sync.Mutex
	next time.Time
	per  time.Duration
}

func newPacer(rate int) *pacer { return &pacer{per: time.Second / time.Duration(rate)} }

func (p *pacer) wait(ctx context.Context, n int) error {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now.Add(-100 * time.Millisecond)) {
		p.next = now.Add(-100 * time.Millisecond) // the burst allowance
	}
	at := p.next
	p.next = p.next.Add(time.Duration(n) * p.per)
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return nil
}

// every runs fn now and then every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		fn()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
