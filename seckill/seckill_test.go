package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var saleStart = testenv.Now().UTC().Truncate(time.Hour)

type fixture struct {
	t      *testing.T
	s      *seckill.Service
	sl     *seckill.Sale
	r      *testenv.Redis
	db     *sqlx.DB // the campaigns'
	orders *order.Service
	clk    *testenv.Clock
}

// setup opens campaign c1 of sku-1 (price 100) over r, with its orders in 2
// databases × 2 tables of the order block.
func setup(t *testing.T, r *testenv.Redis, stock, limit int64, buckets int, cfg seckill.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	clk := testenv.NewClock(saleStart.Add(time.Second))
	cfg.Namespace, cfg.Now, cfg.IDs = r.Namespace, clk.Now, newIDs(t)
	dbs := testenv.NewSQLs(t, 2)
	orders, err := order.New(r.Client, dbs, order.Config{TablesPerDB: 2, Namespace: r.Namespace, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orders.Close() })
	if err := orders.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := seckill.New(r.Client, dbs[0], orders, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sl, err := s.Create(ctx, seckill.Campaign{ID: "c1", SKU: "sku-1", Price: 100, Stock: stock, Limit: limit, Buckets: buckets, Starts: saleStart, Ends: saleStart.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DeleteKeys(context.Background(), r.Client, "rate:"+r.Namespace+"*") })
	return &fixture{t: t, s: s, sl: sl, r: r, db: dbs[0], orders: orders, clk: clk}
}

var nodes atomic.Int64

// newIDs is a snowflake generator with a node id no other test in this
// binary uses.
func newIDs(t testing.TB) *idgen.Snowflake {
	t.Helper()
	ids, err := idgen.NewSnowflake(context.Background(), idgen.SnowflakeConfig{NodeID: nodes.Add(1) % (idgen.MaxNodeID + 1)})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// deliver relays the outbox to Kafka through send (nil: a real producer) and
// has HandleOrder consume every relayed event.
func (f *fixture) deliver(ctx context.Context, send outbox.Publisher) int {
	f.t.Helper()
	brokers := testenv.Kafka(f.t)
	topic := testenv.Topic(f.t, 4)
	if send == nil {
		send = dial(f.t, brokers)
	}
	relay := outbox.NewRelay(f.r.Client, f.sl.Outboxes(), topic, send)
	relayed, err := relay.DrainAll(ctx)
	if pending, _ := relay.Pending(ctx); err != nil || pending != 0 {
		f.t.Fatalf("%d order events stuck in the outbox: %v", pending, err)
	}
	if relayed == 0 {
		return 0
	}
	// Minutes, not seconds: on a loaded 2-core machine with a fsync per
	// commit, 1,000 orders once took over a minute to write.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c, err := kafka.ConsumeN(cctx, brokers, "orders-"+topic, []string{topic}, int64(relayed), f.s.HandleOrder, kafka.ConsumerConfig{})
	if err != nil || c.Handled() != int64(relayed) {
		f.t.Fatalf("consumer handled %d of %d events: %v", c.Handled(), relayed, err)
	}
	return relayed
}

// collect is a Publisher that keeps the values it is given.
type collect struct {
	mu     sync.Mutex
	values [][]byte
}

func (c *collect) Publish(_ context.Context, ms []outbox.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		c.values = append(c.values, m.Value)
	}
	return nil
}

// drain empties the outbox and returns the order messages it held, for a
// test to hand to HandleOrder itself.
func (f *fixture) drain(ctx context.Context) [][]byte {
	f.t.Helper()
	c := &collect{}
	if _, err := outbox.NewRelay(f.r.Client, f.sl.Outboxes(), "orders", c).DrainAll(ctx); err != nil {
		f.t.Fatal(err)
	}
	return c.values
}

func dial(t *testing.T, brokers []string) *kafka.Publisher {
	t.Helper()
	p, err := kafka.Dial(brokers, "seckill-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// What an order means for its units, as the tests count them.
const (
	statePending  = "pending"  // reserved, unpaid
	statePaid     = "paid"     // paid (or later states)
	stateReleased = "released" // closed unpaid: units back
	stateRejected = "rejected" // closed out of stock: SQL had no unit for it
)

// allOrders reads every order of the test's databases.
func (f *fixture) allOrders(ctx context.Context) []order.Order {
	f.t.Helper()
	var all []order.Order
	for cursor := ""; ; {
		page, next, err := f.orders.Search(ctx, order.Filter{}, cursor, 500)
		if err != nil {
			f.t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

func state(o order.Order) string {
	switch {
	case o.Status == order.Pending:
		return statePending
	case o.Status == order.Closed && o.CloseReason == order.ReasonOutOfStock:
		return stateRejected
	case o.Status == order.Closed:
		return stateReleased
	}
	return statePaid
}

// sqlCounts sums the units of the campaign's orders by what they mean, and
// reads the SKU's available units.
func (f *fixture) sqlCounts(ctx context.Context) (orders map[string]int64, stock int64) {
	f.t.Helper()
	orders = map[string]int64{}
	for _, o := range f.allOrders(ctx) {
		orders[state(o)] += o.Items[0].Qty
	}
	st, err := f.orders.StockOf(ctx, "sku-1")
	if err != nil {
		f.t.Fatal(err)
	}
	return orders, st.Available
}

// errRefused: the order closed before the payment; the money is refunded.
var errRefused = errors.New("paid after the close: refunded")

// pay pays user's reservation id through the order block, as the buyer and
// the gateway's callback would: nil once the order is paid (again, for a
// repeat), errRefused when its close won, seckill.ErrNotReady before the
// consumer created it.
func (f *fixture) pay(ctx context.Context, user, id string) error {
	o, err := f.s.OrderOf(ctx, user, id)
	if err != nil {
		return err
	}
	p, err := f.orders.StartPayment(ctx, o.ID, "test")
	if errors.Is(err, order.ErrIllegalTransition) {
		if o, err = f.orders.Get(ctx, o.ID); err == nil && o.Status == order.Closed {
			err = errRefused
		} else if err == nil && o.Status != order.Paid {
			err = fmt.Errorf("order %d is %s", o.ID, o.Status)
		}
		return err
	}
	if err != nil {
		return err
	}
	out, err := f.orders.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: fmt.Sprint("txn-", p.PayNo), Amount: p.Amount,
		Currency: p.Currency, Success: true, PaidAt: f.clk.Now()})
	switch {
	case err != nil:
		return err
	case out == order.OutcomeRefund:
		return errRefused
	case out != order.OutcomePaid:
		return fmt.Errorf("callback of %s: %s", id, out)
	}
	return nil
}

// TestStress: 10,000 goroutines, users repeating, against 1000 units: exactly
// 1000 sold, every user within its limit, Redis at 0, and after the consumer
// 1000 units of orders in SQL, SQL stock 0 — with and without buckets on a
// cluster, with and without the batcher.
func TestStress(t *testing.T) {
	cases := []struct {
		name    string
		cluster bool
		limit   int64
		buckets int
		batch   bool
		users   int
	}{
		{"redis/limit1", false, 1, 1, false, 3000},
		{"redis/limit3", false, 3, 1, false, 500},
		{"cluster/limit1/k8", true, 1, 8, false, 3000},
		{"cluster/limit3/k8", true, 3, 8, false, 500},
		{"redis/limit1/k4/batched", false, 1, 4, true, 3000},
		{"cluster/limit3/k8/batched", true, 3, 8, true, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := testenv.NewRedis(t)
			if tc.cluster {
				r = testenv.NewRedisCluster(t)
			}
			f := setup(t, r, 1000, tc.limit, tc.buckets, seckill.Config{})
			buy := func(user string) (string, error) { return f.sl.Buy(ctx, user, 1) }
			if tc.batch {
				b := f.sl.NewBatcher(seckill.BatchConfig{MaxBatch: 128})
				defer b.Close()
				buy = func(user string) (string, error) { return b.Buy(ctx, user, 1) }
			}
			var mu sync.Mutex
			perUser := map[string]int64{}
			ids := map[string]bool{}
			var soldOut, limited atomic.Int64
			var wg sync.WaitGroup
			for g := range 10_000 {
				wg.Go(func() {
					user := fmt.Sprintf("u%d", g%tc.users)
					id, err := buy(user)
					switch {
					case err == nil:
						mu.Lock()
						perUser[user]++
						if ids[id] {
							t.Errorf("reservation %s twice", id)
						}
						ids[id] = true
						mu.Unlock()
					case errors.Is(err, seckill.ErrSoldOut):
						soldOut.Add(1)
					case errors.Is(err, seckill.ErrLimitReached):
						limited.Add(1)
					default:
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if len(ids) != 1000 {
				t.Fatalf("%d sold, want exactly 1000 (%d sold out, %d over limit)", len(ids), soldOut.Load(), limited.Load())
			}
			for u, n := range perUser {
				if n > tc.limit {
					t.Fatalf("%s bought %d, limit %d", u, n, tc.limit)
				}
			}
			if left, _ := f.sl.RedisStock(ctx); left != 0 {
				t.Fatalf("Redis stock %d after selling out", left)
			}
			f.deliver(ctx, nil)
			orders, stock := f.sqlCounts(ctx)
			if orders[statePending] != 1000 || stock != 0 || len(orders) != 1 {
				t.Fatalf("SQL: orders %v, stock %d; want 1000 pending, 0 left", orders, stock)
			}
			if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() || rep.InFlight != 0 {
				t.Fatalf("reconcile: %+v, %v", rep, err)
			}
		})
	}
}

func TestRules(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 2, 1, seckill.Config{})
	if _, err := f.sl.Buy(ctx, "a", 3); !errors.Is(err, seckill.ErrInvalid) {
		t.Fatalf("qty over the limit: %v", err)
	}
	if _, err := f.sl.Buy(ctx, "", 1); !errors.Is(err, seckill.ErrInvalid) {
		t.Fatalf("empty user: %v", err)
	}
	if _, err := f.sl.Buy(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sl.Buy(ctx, "a", 1); !errors.Is(err, seckill.ErrLimitReached) {
		t.Fatalf("third unit: %v", err)
	}
	f.clk.Add(-time.Hour)
	if _, err := f.sl.Buy(ctx, "b", 1); !errors.Is(err, seckill.ErrNotStarted) {
		t.Fatalf("before the start: %v", err)
	}
	f.clk.Add(3 * time.Hour)
	if _, err := f.sl.Buy(ctx, "b", 1); !errors.Is(err, seckill.ErrEnded) {
		t.Fatalf("after the end: %v", err)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 8 {
		t.Fatalf("refusals changed the stock: %d left", left)
	}
	for _, c := range []seckill.Campaign{
		{ID: "bad id!", SKU: "s", Stock: 1, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)},
		{ID: "c2", SKU: "s", Stock: 0, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)},
		{ID: "c2", SKU: "s", Stock: 4, Limit: 1, Buckets: 5, Starts: saleStart, Ends: saleStart.Add(time.Hour)},
		{ID: "c2", SKU: "s", Stock: 4, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart},
		{ID: "c1", SKU: "s2", Stock: 4, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)},
	} {
		if _, err := f.s.Create(ctx, c); !errors.Is(err, seckill.ErrInvalid) {
			t.Errorf("Create(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

// One unit per bucket, every buyer homed on the same bucket: all units are
// still sold (no undersell), and a buyer who finds nothing gets its quota back.
func TestBucketsServeFromElsewhere(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedisCluster(t), 8, 1, 8, seckill.Config{})
	sold := 0
	for i := range 9 {
		_, err := f.sl.Buy(ctx, fmt.Sprintf("user-%d", i), 1)
		if err == nil {
			sold++
		} else if !errors.Is(err, seckill.ErrSoldOut) || i < 8 {
			t.Fatalf("buyer %d: %v", i, err)
		}
	}
	if sold != 8 {
		t.Fatalf("sold %d of 8", sold)
	}
	// user-8 was told sold out and holds no quota: once a unit comes back
	// it can buy.
	f.clk.Add(16 * time.Minute)
	f.deliver(ctx, nil)
	if n, err := f.sl.ReleaseDue(ctx); err != nil || n != 8 {
		t.Fatalf("released %d, %v", n, err)
	}
	if _, err := f.sl.Buy(ctx, "user-8", 1); err != nil {
		t.Fatalf("sold-out buyer after units came back: %v", err)
	}
}

func TestRateLimitAtEntrance(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 100, 100, 1, seckill.Config{UserLimit: redis_rate.PerMinute(2)})
	for i := range 3 {
		_, err := f.sl.Buy(ctx, "eager", 1)
		if (i < 2) != (err == nil) || i == 2 && !errors.Is(err, seckill.ErrRateLimited) {
			t.Fatalf("buy %d: %v", i+1, err)
		}
	}
	if left, _ := f.sl.RedisStock(ctx); left != 98 {
		t.Fatalf("a rate-limited buy touched the stock: %d left", left)
	}
}

// Pay and the timeout race on 200 reservations: each ends paid or released,
// never both; released units and quotas come back exactly once.
func TestPayRacesTimeout(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 200, 1, 4, seckill.Config{})
	var ids []string
	for i := range 200 {
		id, err := f.sl.Buy(ctx, fmt.Sprintf("p%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	f.deliver(ctx, nil)
	f.clk.Add(16 * time.Minute)
	user := func(i int) string { return fmt.Sprintf("p%d", i) }
	var paid, refused atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 3 { // several release passes race the payments
			if _, err := f.sl.ReleaseDue(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	for i, id := range ids {
		wg.Go(func() {
			err := f.pay(ctx, user(i), id)
			switch {
			case err == nil:
				paid.Add(1)
			case errors.Is(err, errRefused):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f.sl.ReleaseDue(ctx) // whatever the racing passes had not reached
	orders, stock := f.sqlCounts(ctx)
	if paid.Load()+refused.Load() != 200 || orders[statePaid] != paid.Load() || orders[stateReleased] != refused.Load() {
		t.Fatalf("paid %d, refused %d; SQL %v", paid.Load(), refused.Load(), orders)
	}
	left, _ := f.sl.RedisStock(ctx)
	if stock != refused.Load() || left != refused.Load() {
		t.Fatalf("released %d units; SQL stock %d, Redis stock %d", refused.Load(), stock, left)
	}
	// Paying twice is fine; paying a released one is refused again.
	for i, id := range ids {
		err := f.pay(ctx, user(i), id)
		if err != nil && !errors.Is(err, errRefused) {
			t.Fatal(err)
		}
	}
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() || rep.InFlight != 0 {
		t.Fatalf("after the race: %+v", rep)
	}
}

// A reservation released before its order event reached SQL: the release
// creates the order (due) and closes it, and the late event neither creates
// a second order nor deducts stock.
func TestReleaseBeforeOrderRecorded(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 5, 1, 1, seckill.Config{})
	id, err := f.sl.Buy(ctx, "late", 1)
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Add(16 * time.Minute)
	if n, err := f.sl.ReleaseDue(ctx); n != 1 || err != nil {
		t.Fatalf("released %d, %v", n, err)
	}
	f.deliver(ctx, nil)
	orders, stock := f.sqlCounts(ctx)
	if orders[stateReleased] != 1 || orders[statePending] != 0 || stock != 5 {
		t.Fatalf("SQL %v, stock %d; want one released order and all 5 units", orders, stock)
	}
	if err := f.pay(ctx, "late", id); !errors.Is(err, errRefused) {
		t.Fatalf("pay after release: %v", err)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 5 {
		t.Fatalf("Redis stock %d, want 5", left)
	}
}

// down refuses every batch while set, as an unreachable Kafka would.
type down struct {
	p    outbox.Publisher
	down atomic.Bool
}

func (d *down) Publish(ctx context.Context, ms []outbox.Message) error {
	if d.down.Load() {
		return errors.New("kafka unreachable")
	}
	return d.p.Publish(ctx, ms)
}

// Kafka is unreachable during the sale: events wait in Redis, and every
// order is created once it is back.
func TestKafkaOutage(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedisCluster(t), 300, 1, 4, seckill.Config{})
	send := &down{p: dial(t, testenv.Kafka(t))}
	send.down.Store(true)
	relay := outbox.NewRelay(f.r.Client, f.sl.Outboxes(), "unused", send)
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() { f.sl.Buy(ctx, fmt.Sprintf("k%d", i), 1) })
	}
	wg.Wait()
	if _, err := relay.Drain(ctx); err == nil {
		t.Fatal("relay reported no error with Kafka down")
	}
	if pending, _ := relay.Pending(ctx); pending == 0 {
		t.Fatal("no events waiting in the outbox during the outage")
	}
	send.down.Store(false)
	f.deliver(ctx, send)
	orders, stock := f.sqlCounts(ctx)
	if orders[statePending] != 300 || stock != 0 {
		t.Fatalf("SQL %v, stock %d", orders, stock)
	}
}

// A redis-server with AOF (fsync every second) is killed and restarted in
// the middle of the sale. It may come back having forgotten up to a second
// of decrements — and sell those units again — but SQL never records more
// orders than there is stock.
func TestRedisRestartMidSale(t *testing.T) {
	ctx := context.Background()
	r, server := testenv.NewPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "everysec")
	f := setup(t, r, 500, 1, 1, seckill.Config{})
	var sold atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	stop := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := f.sl.Buy(ctx, fmt.Sprintf("r%d", next.Add(1)), 1); err == nil {
					sold.Add(1)
				} else if errors.Is(err, seckill.ErrSoldOut) {
					return
				}
			}
		})
	}
	for sold.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	if err := server.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	// Sell out whatever Redis still believes it has.
	for i := 0; ; i++ {
		if _, err := f.sl.Buy(ctx, fmt.Sprintf("after%d", i), 1); errors.Is(err, seckill.ErrSoldOut) {
			break
		}
	}
	f.deliver(ctx, nil)
	orders, stock := f.sqlCounts(ctx)
	if orders[statePending] > 500 || orders[statePending]+stock != 500 || stock < 0 {
		t.Fatalf("SQL %v, stock %d: more recorded than stock", orders, stock)
	}
	t.Logf("sold %d in Redis across the restart; SQL: %v, stock %d", sold.Load(), orders, stock)
}

// Poison order messages — not JSON, an unknown version or field, trailing
// data, no orders, a bad quantity, user or deadline, an id of another
// campaign or bucket, an unknown campaign — are skipped with a count, and the
// orders behind them on their partition are created.
func TestPoisonOrdersDoNotBlock(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 2, seckill.Config{})
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 1)
	payBy := saleStart.Add(time.Hour)
	good := func(id, user string) []byte {
		return seckill.EncodeOrderMessage(seckill.OrderMessage{Campaign: "c1", Orders: []seckill.Order{{ID: id, User: user, Qty: 1, PayBy: payBy}}})
	}
	poison := []string{
		`not json`,
		`{"v":2,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":1,"pay_by":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":1,"pay_by":1,"price":5}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":1,"pay_by":1}]} {}`,
		`{"v":1,"campaign":"c1","orders":[]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":0,"pay_by":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":1.5,"pay_by":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x y","qty":1,"pay_by":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c2-0-9","user":"x","qty":1,"pay_by":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-2-9","user":"x","qty":1,"pay_by":1}]}`,
		`{"v":1,"campaign":"c1","orders":[{"id":"c1-0-9","user":"x","qty":1,"pay_by":1},{"id":"c1-0","user":"y","qty":1,"pay_by":1}]}`,
		`{"v":1,"campaign":"nope","orders":[{"id":"nope-0-9","user":"x","qty":1,"pay_by":1}]}`,
	}
	values := [][]byte{good("c1-0-1001", "before")}
	for _, p := range poison {
		values = append(values, []byte(p))
	}
	values = append(values, good("c1-1-1002", "after"))
	var msgs []outbox.Message
	for _, v := range values { // one partition: in this order
		msgs = append(msgs, outbox.Message{Topic: topic, Key: []byte("c1"), Value: v})
	}
	if err := dial(t, brokers).Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var badMessage atomic.Int64
	c, err := kafka.ConsumeN(cctx, brokers, "orders-"+topic, []string{topic}, int64(len(values)), f.s.HandleOrder, kafka.ConsumerConfig{
		OnPoison: func(_ string, _ int32, _ int64, err error) {
			if errors.Is(err, seckill.ErrBadMessage) {
				badMessage.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Poisoned() != int64(len(poison)) || badMessage.Load() != int64(len(poison)) || c.Handled() != 2 {
		t.Fatalf("poisoned %d (%d ErrBadMessage), handled %d; want %d poisoned, 2 handled", c.Poisoned(), badMessage.Load(), c.Handled(), len(poison))
	}
	orders, stock := f.sqlCounts(ctx)
	if orders[statePending] != 2 || stock != 8 || len(orders) != 1 {
		t.Fatalf("SQL %v, stock %d; want the 2 good orders pending, 8 left", orders, stock)
	}
}

// A sale's rules come from SQL, not from the caller: Open by id gives the
// recorded limit, buckets and window, a copy of the rules changes nothing,
// and another process opening the campaign gets the same rules.
func TestSaleKeepsRecordedRules(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 2, seckill.Config{})
	if sl, err := f.s.Open(ctx, "c1"); err != nil || sl != f.sl {
		t.Fatalf("Open(c1) = %p, %v; want the cached sale %p", sl, err, f.sl)
	}
	if _, err := f.s.Open(ctx, "nope"); !errors.Is(err, seckill.ErrNoCampaign) {
		t.Fatalf("Open(nope): %v", err)
	}
	rules := f.sl.Campaign()
	rules.Limit, rules.Buckets, rules.Ends = 100, 1, saleStart.AddDate(1, 0, 0)
	other, err := seckill.New(f.r.Client, f.db, f.orders, seckill.Config{Namespace: f.r.Namespace, Now: f.clk.Now, IDs: newIDs(t)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := other.Open(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	want := seckill.Campaign{ID: "c1", SKU: "sku-1", Stock: 10, Limit: 1, Buckets: 2, Starts: saleStart, Ends: saleStart.Add(time.Hour)}
	for _, sl := range []*seckill.Sale{f.sl, again} {
		if got := sl.Campaign(); got.ID != want.ID || got.SKU != want.SKU || got.Stock != want.Stock || got.Limit != want.Limit ||
			got.Buckets != want.Buckets || !got.Starts.Equal(want.Starts) || !got.Ends.Equal(want.Ends) {
			t.Fatalf("rules %+v, want %+v", got, want)
		}
	}
	if _, err := f.sl.Buy(ctx, "a", 2); !errors.Is(err, seckill.ErrInvalid) {
		t.Fatalf("2 units with a limit of 1: %v", err)
	}
	if _, err := f.sl.Buy(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Buy(ctx, "a", 1); !errors.Is(err, seckill.ErrLimitReached) {
		t.Fatalf("second unit through another process: %v", err)
	}
	f.clk.Add(time.Hour)
	if _, err := again.Buy(ctx, "b", 1); !errors.Is(err, seckill.ErrEnded) {
		t.Fatalf("after the recorded end: %v", err)
	}
}

// A Redis error while the release path reads a reservation (its order not
// recorded yet) aborts that release instead of closing it as if it were gone:
// the units stay reserved, and the next pass releases and restocks them.
func TestReleaseRedisErrorKeepsUnits(t *testing.T) {
	ctx := context.Background()
	fault := &failNext{name: "hget"}
	r := ownClient(t, testenv.NewRedis(t), "")
	r.Client.AddHook(fault)
	f := setup(t, r, 5, 1, 1, seckill.Config{})
	if _, err := f.sl.Buy(ctx, "late", 1); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(16 * time.Minute)
	fault.n.Store(1)
	if n, err := f.sl.ReleaseDue(ctx); n != 0 || !errors.Is(err, errInjected) {
		t.Fatalf("pass with a failing read: released %d, %v; want 0 and the error", n, err)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 4 {
		t.Fatalf("Redis stock %d after the failed pass, want 4 (unit still reserved)", left)
	}
	if n, err := f.sl.ReleaseDue(ctx); n != 1 || err != nil {
		t.Fatalf("next pass released %d, %v; want 1", n, err)
	}
	f.deliver(ctx, nil)
	orders, stock := f.sqlCounts(ctx)
	if left, _ := f.sl.RedisStock(ctx); left != 5 || stock != 5 || orders[stateReleased] != 1 {
		t.Fatalf("Redis stock %d, SQL stock %d, orders %v; want all 5 back and one released order", left, stock, orders)
	}
}

// Redis comes back from an older snapshot (a restart, or a failover to a
// replica that missed writes) after some reservations were recorded: the
// buyers after it still get ids never used before, and each order row belongs
// to the buyer who was given its id.
func TestIDsNeverRepeatAfterRedisRollback(t *testing.T) {
	ctx := context.Background()
	r, server := testenv.NewPrivateRedis(t)
	f := setup(t, r, 10, 1, 1, seckill.Config{})
	owner := map[string]string{}
	buy := func(users ...string) {
		for _, u := range users {
			id, err := f.sl.Buy(ctx, u, 1)
			if err != nil {
				t.Fatalf("%s: %v", u, err)
			}
			if owner[id] != "" {
				t.Errorf("id %s given to %s and to %s", id, owner[id], u)
			}
			owner[id] = u
		}
	}
	buy("u1", "u2")
	if err := r.Client.Save(ctx).Err(); err != nil { // what the restart comes back to
		t.Fatal(err)
	}
	buy("u3", "u4")
	f.deliver(ctx, nil)
	if err := server.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	buy("u5", "u6")
	f.deliver(ctx, nil)
	byRequest := map[string][]string{}
	for _, o := range f.allOrders(ctx) {
		byRequest[o.RequestID] = append(byRequest[o.RequestID], o.User)
	}
	for id, u := range owner {
		if got := byRequest[id]; len(got) != 1 || got[0] != u {
			t.Errorf("orders of reservation %s: users %q, want just %s", id, got, u)
		}
	}
}

// An order message reusing a recorded reservation id for the same buyer with
// another quantity is not taken for a redelivery: it is a poison conflict,
// and the recorded order stays as it was. The same order delivered again is
// fine. Orders are keyed by (buyer, reservation id), so the id arriving with
// another buyer is that buyer's own order: alice's is untouched, and the
// stray order's close cannot release alice's reservation.
func TestReusedIDIsAConflict(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 2, 1, seckill.Config{})
	id, err := f.sl.Buy(ctx, "alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	f.deliver(ctx, nil)
	alice, err := f.s.OrderOf(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(user string, qty int64) []byte {
		return seckill.EncodeOrderMessage(seckill.OrderMessage{Campaign: "c1", Orders: []seckill.Order{{ID: id, User: user, Qty: qty, PayBy: alice.PayDeadline}}})
	}
	if err := f.s.HandleOrder(ctx, []byte("c1"), msg("alice", 2)); !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, seckill.ErrIDConflict) {
		t.Fatalf("alice's id with another quantity: %v; want ErrIDConflict, poison", err)
	}
	if err := f.s.HandleOrder(ctx, []byte("c1"), msg("alice", 1)); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if err := f.s.HandleOrder(ctx, []byte("c1"), msg("mallory", 1)); err != nil {
		t.Fatalf("the id with another buyer: %v", err)
	}
	mallory, err := f.s.OrderOf(ctx, "mallory", id)
	if err != nil || mallory.ID == alice.ID {
		t.Fatalf("mallory's order %d (%v), alice's %d", mallory.ID, err, alice.ID)
	}
	if again, err := f.s.OrderOf(ctx, "alice", id); err != nil || again.ID != alice.ID || again.Items[0].Qty != 1 || again.Status != order.Pending {
		t.Fatalf("alice's order is now %+v (%v)", again, err)
	}
	closed, err := f.orders.CancelOrder(ctx, mallory.ID, order.ReasonOperatorCancel)
	if err != nil {
		t.Fatal(err)
	}
	ev := fmt.Appendf(nil, `{"v":1,"id":"o%d-v%d","kind":"status","order":%d,"user":"mallory","from":"pending","to":"closed","version":%d,"amount":100,"at":1}`,
		closed.ID, closed.Version, closed.ID, closed.Version)
	if err := f.s.HandleOrderEvent(ctx, nil, ev); !errors.Is(err, seckill.ErrIDConflict) || !errors.Is(err, outbox.ErrPoison) {
		t.Fatalf("the stray order's close: %v; want ErrIDConflict, poison", err)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 9 {
		t.Fatalf("Redis stock %d: the stray close released alice's unit", left)
	}
}

// Payments race the consumer creating the orders: every payment that returns
// nil is recorded (the order is paid), whichever of the two got there first,
// and the paid reservations close in Redis without restocking.
func TestPayRacesOrderCreation(t *testing.T) {
	ctx := context.Background()
	const n = 400
	f := setup(t, testenv.NewRedis(t), n, 1, 4, seckill.Config{})
	ids := make([]string, n)
	for i := range ids {
		id, err := f.sl.Buy(ctx, fmt.Sprintf("p%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	values := f.drain(ctx)
	var wg sync.WaitGroup
	for w := range 4 { // consumers, one per partition
		wg.Go(func() {
			for i := w; i < len(values); i += 4 {
				if err := f.s.HandleOrder(ctx, nil, values[i]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i, id := range ids {
		wg.Go(func() {
			for {
				err := f.pay(ctx, fmt.Sprintf("p%d", i), id)
				if !errors.Is(err, seckill.ErrNotReady) {
					if err != nil {
						t.Errorf("pay %s: %v", id, err)
					}
					return
				}
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	orders, stock := f.sqlCounts(ctx)
	if orders[statePaid] != n || len(orders) != 1 || stock != 0 {
		t.Fatalf("every Pay returned nil, yet SQL has %v, stock %d; want %d paid", orders, stock, n)
	}
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() {
		t.Fatalf("after the payments: %+v, %v", rep, err)
	}
	f.events(ctx)
	if open, left := f.open(ctx), int64(0); open != 0 {
		left, _ = f.sl.RedisStock(ctx)
		t.Fatalf("%d paid reservations still open in Redis after the events (stock %d)", open, left)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 0 {
		t.Fatalf("closing paid reservations restocked %d units", left)
	}
}

// Several release passes race the consumer creating the orders and the
// buyers paying them, all reservations being due: no pass fails (deadlocks
// and lock waits are retried), the passes' counts add up to exactly the
// releases made, and every unit and quota comes back exactly once.
func TestReleaseRacesConsumerAndPay(t *testing.T) {
	ctx := context.Background()
	const n = 300
	f := setup(t, testenv.NewRedis(t), n, 1, 4, seckill.Config{})
	ids := make([]string, n)
	for i := range ids {
		id, err := f.sl.Buy(ctx, fmt.Sprintf("u%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	values := f.drain(ctx)
	f.clk.Add(16 * time.Minute)
	var released, paid, refused atomic.Int64
	release := func() {
		k, err := f.sl.ReleaseDue(ctx)
		if err != nil {
			t.Errorf("release pass: %v", err)
		}
		released.Add(int64(k))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(values); i += 4 {
				if err := f.s.HandleOrder(ctx, nil, values[i]); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for range 3 {
				release()
			}
		})
	}
	for i, id := range ids {
		wg.Go(func() {
			for {
				switch err := f.pay(ctx, fmt.Sprintf("u%d", i), id); {
				case err == nil:
					paid.Add(1)
				case errors.Is(err, errRefused):
					refused.Add(1)
				case errors.Is(err, seckill.ErrNotReady):
					time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
					continue
				default:
					t.Errorf("pay %s: %v", id, err)
				}
				return
			}
		})
	}
	wg.Wait()
	release() // whatever the racing passes had not reached
	orders, stock := f.sqlCounts(ctx)
	left, _ := f.sl.RedisStock(ctx)
	if paid.Load()+refused.Load() != n || orders[statePaid] != paid.Load() || orders[stateReleased] != refused.Load() ||
		released.Load() != refused.Load() || stock != refused.Load() || left != refused.Load() {
		t.Fatalf("paid %d, refused %d, passes counted %d released; SQL %v, stock %d; Redis stock %d",
			paid.Load(), refused.Load(), released.Load(), orders, stock, left)
	}
	for i := range n { // quotas: back for the released, kept by the payers
		_, err := f.sl.Buy(ctx, fmt.Sprintf("u%d", i), 1)
		if err != nil && !errors.Is(err, seckill.ErrLimitReached) {
			t.Fatal(err)
		}
		if err == nil {
			paid.Add(1)
		}
	}
	if paid.Load() != n {
		t.Fatalf("%d users hold a unit or a quota after buying again, want all %d", paid.Load(), n)
	}
}

// events relays the order block's outbox and hands every event to
// HandleOrderEvent (twice: redeliveries change nothing), returning how many.
func (f *fixture) events(ctx context.Context) int {
	f.t.Helper()
	c := &collect{}
	n, err := f.orders.RelayOutbox(ctx, c, "order-events", 10_000)
	if err != nil {
		f.t.Fatal(err)
	}
	for range 2 {
		for _, v := range c.values {
			if err := f.s.HandleOrderEvent(ctx, nil, v); err != nil {
				f.t.Fatalf("event %s: %v", v, err)
			}
		}
	}
	return n
}

// open counts the reservations open in Redis.
func (f *fixture) open(ctx context.Context) int64 {
	f.t.Helper()
	n, err := f.sl.OpenReservations(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// An order cancelled before its deadline, and one paid, reach the gate
// through the order block's events at once: the cancelled unit is back on
// sale in Redis with its buyer's quota, the paid one's reservation closes
// and its quota stays used. Every event delivered twice changes nothing.
func TestOrderEventsSettleAtOnce(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedisCluster(t), 4, 1, 2, seckill.Config{})
	f.payOneCancelOne(ctx)
	if n := f.events(ctx); n < 4 { // 2 created, 1 paid, 1 closed
		t.Fatalf("%d order events", n)
	}
	orders, stock := f.sqlCounts(ctx)
	left, _ := f.sl.RedisStock(ctx)
	if left != 3 || stock != 3 || f.open(ctx) != 0 || orders[statePaid] != 1 || orders[stateReleased] != 1 {
		t.Fatalf("Redis stock %d, SQL %v with %d left, %d reservations open; want 3 in both and none open", left, orders, stock, f.open(ctx))
	}
	if _, err := f.sl.Buy(ctx, "cancels", 1); err != nil {
		t.Fatalf("the cancelled buyer's quota did not come back: %v", err)
	}
	if _, err := f.sl.Buy(ctx, "keeps", 1); !errors.Is(err, seckill.ErrLimitReached) {
		t.Fatalf("the paying buyer bought again: %v", err)
	}
	if bad := f.s.HandleOrderEvent(ctx, nil, []byte(`{"v":1}`)); !errors.Is(bad, outbox.ErrPoison) {
		t.Fatalf("a malformed event: %v, want poison", bad)
	}
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() {
		t.Fatalf("after the events: %+v, %v", rep, err)
	}
}

// payOneCancelOne has "keeps" buy and pay, and "cancels" buy and cancel
// the order: four order events wait in the order outbox.
func (f *fixture) payOneCancelOne(ctx context.Context) {
	f.t.Helper()
	ids := map[string]string{}
	for _, u := range []string{"keeps", "cancels"} {
		id, err := f.sl.Buy(ctx, u, 1)
		if err != nil {
			f.t.Fatal(err)
		}
		ids[u] = id
	}
	f.deliver(ctx, nil)
	if err := f.pay(ctx, "keeps", ids["keeps"]); err != nil {
		f.t.Fatal(err)
	}
	o, err := f.s.OrderOf(ctx, "cancels", ids["cancels"])
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
		f.t.Fatal(err)
	}
}

// record hands everything in the outbox to HandleOrder.
func (f *fixture) record(ctx context.Context) {
	f.t.Helper()
	for _, v := range f.drain(ctx) {
		if err := f.s.HandleOrder(ctx, nil, v); err != nil {
			f.t.Fatal(err)
		}
	}
}

// userOn returns a user whose quota lives on bucket b.
func userOn(sl *seckill.Sale, b int, prefix string) string {
	for i := 0; ; i++ {
		if u := fmt.Sprintf("%s%d", prefix, i); sl.Home(u) == b {
			return u
		}
	}
}

// lossy is a fixture whose Redis client talks through a reply-losing proxy.
func lossy(t *testing.T, stock, limit int64, buckets int) (*fixture, *testenv.Proxy) {
	t.Helper()
	base := testenv.NewRedis(t)
	p := testenv.NewProxy(t, serverAddr(t, base))
	r := ownClient(t, base, p.Addr)
	f := setup(t, r, stock, limit, buckets, seckill.Config{})
	if err := seckill.LoadScripts(context.Background(), r.Client); err != nil {
		t.Fatal(err)
	}
	return f, p
}

// Every script call that changes state survives a lost reply: go-redis
// sends it again on a new connection, and the answer and the state are those
// of one call — one reservation, the right answer to the buyer, units and
// quotas returned once.
func TestLostRepliesActOnce(t *testing.T) {
	ctx := context.Background()
	lost := func(t *testing.T, p *testenv.Proxy) {
		t.Helper()
		if p.Cuts() != 1 {
			t.Fatalf("%d replies lost, want 1", p.Cuts())
		}
	}
	stock := func(t *testing.T, f *fixture, want int64) {
		t.Helper()
		if left, err := f.sl.RedisStock(ctx); left != want || err != nil {
			t.Fatalf("Redis stock %d (%v), want %d", left, err, want)
		}
	}
	t.Run("buy", func(t *testing.T) {
		f, p := lossy(t, 10, 2, 1)
		p.DropReplyTo("victim", 1)
		id, err := f.sl.Buy(ctx, "victim", 1)
		lost(t, p)
		if err != nil {
			t.Fatal(err)
		}
		stock(t, f, 9)
		if _, err := f.sl.Buy(ctx, "victim", 1); err != nil {
			t.Fatalf("second unit of 2: %v", err)
		}
		if _, err := f.sl.Buy(ctx, "victim", 1); !errors.Is(err, seckill.ErrLimitReached) {
			t.Fatalf("third unit of 2: %v", err)
		}
		f.record(ctx)
		if err := f.pay(ctx, "victim", id); err != nil {
			t.Fatalf("pay the returned id: %v", err)
		}
	})
	t.Run("batch", func(t *testing.T) {
		f, p := lossy(t, 10, 1, 1)
		b := f.sl.NewBatcher(seckill.BatchConfig{Linger: 50 * time.Millisecond})
		defer b.Close()
		p.DropReplyTo("victim", 1)
		var wg sync.WaitGroup
		for _, u := range []string{"victim", "a", "b", "c", "d"} {
			wg.Go(func() {
				if _, err := b.Buy(ctx, u, 1); err != nil {
					t.Errorf("%s: %v", u, err)
				}
			})
		}
		wg.Wait()
		lost(t, p)
		stock(t, f, 5)
	})
	// The victim's home bucket is empty and the other has one unit: the
	// home script holds the quota (call 1), the take script takes the unit
	// from the other bucket (call 2).
	for _, nth := range []int{1, 2} {
		t.Run(fmt.Sprintf("hold-and-take/call%d", nth), func(t *testing.T) {
			f, p := lossy(t, 2, 1, 2)
			home := f.sl.Home("victim")
			if _, err := f.sl.Buy(ctx, userOn(f.sl, home, "filler"), 1); err != nil {
				t.Fatal(err)
			}
			p.DropReplyTo("victim", nth)
			if _, err := f.sl.Buy(ctx, "victim", 1); err != nil {
				t.Fatalf("the last unit: %v", err)
			}
			lost(t, p)
			stock(t, f, 0)
		})
	}
	// The victim has one unit due and one not: its release loses the reply
	// of the close script (call 1) or of the quota return (call 2).
	for _, nth := range []int{1, 2} {
		t.Run(fmt.Sprintf("release/call%d", nth), func(t *testing.T) {
			f, p := lossy(t, 10, 2, 1)
			due, err := f.sl.Buy(ctx, "victim", 1)
			if err != nil {
				t.Fatal(err)
			}
			f.clk.Add(8 * time.Minute)
			if _, err := f.sl.Buy(ctx, "victim", 1); err != nil {
				t.Fatal(err)
			}
			f.record(ctx)
			f.clk.Add(8 * time.Minute)
			p.DropReplyTo(due, nth)
			if n, err := f.sl.ReleaseDue(ctx); n != 1 || err != nil {
				t.Fatalf("released %d, %v; want 1", n, err)
			}
			lost(t, p)
			stock(t, f, 9)
			if _, err := f.sl.Buy(ctx, "victim", 1); err != nil {
				t.Fatalf("the released unit's quota did not come back: %v", err)
			}
			if _, err := f.sl.Buy(ctx, "victim", 1); !errors.Is(err, seckill.ErrLimitReached) {
				t.Fatalf("quota came back twice: %v", err)
			}
		})
	}
}

// checkRebuilt asserts what a repaired campaign must satisfy: Reconcile finds
// nothing to repair; units sold in SQL + Redis stock + units in flight =
// the initial stock; users at the limit in SQL cannot buy more; and every
// pending order is released once due, its units back in both stores.
func (f *fixture) checkRebuilt(ctx context.Context, initial, limit int64) {
	f.t.Helper()
	rep, err := f.sl.Reconcile(ctx, false)
	if err != nil || !rep.OK() {
		f.t.Fatalf("after the repair: %+v, %v", rep, err)
	}
	orders, _ := f.sqlCounts(ctx)
	if sold := orders[statePending] + orders[statePaid]; sold+rep.RedisStock+rep.InFlight != initial {
		f.t.Fatalf("sold %d in SQL + Redis stock %d + in flight %d ≠ %d", sold, rep.RedisStock, rep.InFlight, initial)
	}
	holds := map[string]int64{}
	for _, o := range f.allOrders(ctx) {
		if st := state(o); st == statePending || st == statePaid {
			holds[o.User] += o.Items[0].Qty
		}
	}
	for u, n := range holds {
		if n < limit {
			continue
		}
		if _, err := f.sl.Buy(ctx, u, 1); !errors.Is(err, seckill.ErrLimitReached) {
			f.t.Errorf("%s holds %d units in SQL and bought again: %v", u, limit, err)
		}
	}
	f.clk.Add(time.Hour)
	if n, err := f.sl.ReleaseDue(ctx); err != nil || int64(n) != orders[statePending] {
		f.t.Fatalf("released %d of %d pending orders: %v", n, orders[statePending], err)
	}
	after, stock := f.sqlCounts(ctx)
	if left, _ := f.sl.RedisStock(ctx); stock != initial-after[statePaid] || left != stock {
		f.t.Fatalf("after the releases: SQL %v, stock %d, Redis stock %d; want %d in both", after, stock, left, initial-after[statePaid])
	}
}

// A Redis without persistence restarts in the middle of a sale and forgets
// the campaign. Buy says so instead of selling from nothing; Reconcile
// reports the loss and rebuilds stock, quotas and pending reservations from
// SQL, counting the orders that were in Kafka at the restart once the
// consumer has caught up.
func TestReconcileAfterRestartWithoutPersistence(t *testing.T) {
	ctx := context.Background()
	r, server := testenv.NewPrivateRedis(t)
	f := setup(t, r, 20, 2, 2, seckill.Config{})
	ids := map[string][]string{}
	buy := func(user string, n int) {
		for range n {
			id, err := f.sl.Buy(ctx, user, 1)
			if err != nil {
				t.Fatalf("%s: %v", user, err)
			}
			ids[user] = append(ids[user], id)
		}
	}
	buy("u0", 2)
	buy("u1", 2)
	buy("u2", 1)
	buy("u3", 1)
	f.record(ctx)
	for _, u := range []string{"u0", "u2"} {
		if err := f.pay(ctx, u, ids[u][0]); err != nil {
			t.Fatal(err)
		}
	}
	buy("u4", 2)
	inKafka := f.drain(ctx) // relayed, not consumed yet at the restart
	if err := server.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sl.Buy(ctx, "u9", 1); !errors.Is(err, seckill.ErrStateLost) {
		t.Fatalf("buy with the state gone: %v, want ErrStateLost", err)
	}
	for _, v := range inKafka { // the consumer catches up
		if err := f.s.HandleOrder(ctx, nil, v); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := f.sl.Reconcile(ctx, false)
	if err != nil || rep.LostBuckets != 2 || rep.Missing != 6 || rep.ShortQuotas != 5 || rep.Drift != -12 || rep.Repaired {
		t.Fatalf("report of the loss: %+v, %v; want 2 lost buckets, 6 missing, 5 short quotas, drift -12", rep, err)
	}
	if rep, err = f.sl.Reconcile(ctx, true); err != nil || !rep.Repaired {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	f.checkRebuilt(ctx, 20, 2)
}

// A master of a Redis Cluster fails over to a replica that missed its last
// writes. Reservations, quotas and stock decrements are lost; some of their
// orders reached SQL through the outbox before the failover. Reconcile
// reports and repairs the loss once the consumer has caught up.
func TestReconcileAfterFailover(t *testing.T) {
	ctx := context.Background()
	r, cc := testenv.NewPrivateCluster(t)
	f := setup(t, r, 40, 2, 4, seckill.Config{})
	on0 := func(prefix string) string { return userOn(f.sl, 0, prefix) }
	buy := func(user string, n int) []string {
		var ids []string
		for range n {
			id, err := f.sl.Buy(ctx, user, 1)
			if err != nil {
				t.Fatalf("%s: %v", user, err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	early := []string{on0("a"), on0("b"), on0("c"), "x", "y", "z"}
	var paidID string
	for _, u := range early {
		paidID = buy(u, 1)[0]
	}
	f.record(ctx)
	if err := f.pay(ctx, early[len(early)-1], paidID); err != nil {
		t.Fatal(err)
	}
	sh := testenv.ShardOf(t, cc, f.sl.Key(0, "stock"))
	sh.Cut(t)
	buy(early[0], 1)
	buy(early[1], 1)
	buy(on0("d"), 2)
	inKafka := f.drain(ctx) // relayed before the failover
	buy(early[2], 1)        // lost with the master
	loser := on0("e")
	lost := buy(loser, 1)[0]
	sh.Failover(t)
	for _, v := range inKafka {
		if err := f.s.HandleOrder(ctx, nil, v); err != nil {
			t.Fatal(err)
		}
	}
	f.record(ctx)
	rep, err := f.sl.Reconcile(ctx, false)
	if err != nil || rep.Missing == 0 || rep.ShortQuotas == 0 || rep.Drift <= 0 || rep.OK() {
		t.Fatalf("report after the failover: %+v, %v; want missing reservations, short quotas and a positive drift", rep, err)
	}
	t.Logf("after the failover: %+v", rep)
	if rep, err = f.sl.Reconcile(ctx, true); err != nil || !rep.Repaired {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	if err := f.pay(ctx, loser, lost); !errors.Is(err, seckill.ErrNotReady) {
		t.Fatalf("paying a reservation the failover lost before it was relayed: %v", err)
	}
	f.checkRebuilt(ctx, 40, 2)
}

// Reconcile repairs a lost bucket while buyers keep buying on all buckets and
// nothing is relayed (every reservation in flight): each bucket is rewritten
// only if no decision changed it since it was read, so exactly the stock is
// sold, none of it twice.
func TestRepairDuringSale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const stock = 300
	f := setup(t, testenv.NewRedis(t), stock, 1, 4, seckill.Config{})
	if err := f.r.Client.Del(ctx, f.sl.Key(2, "stock")).Err(); err != nil {
		t.Fatal(err)
	}
	var next, sold, lost atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := f.sl.Buy(ctx, fmt.Sprintf("b%d", next.Add(1)), 1)
				switch {
				case err == nil:
					sold.Add(1)
				case errors.Is(err, seckill.ErrStateLost):
					lost.Add(1)
				case errors.Is(err, seckill.ErrSoldOut):
					return
				default:
					t.Error(err)
					return
				}
			}
		})
	}
	buyersDone := make(chan struct{})
	go func() { wg.Wait(); close(buyersDone) }()
	testenv.WaitFor(t, "a buy refused for the lost bucket", func() bool { return lost.Load() > 0 })
	repairs := 0
	for waiting := true; waiting; {
		select {
		case <-buyersDone:
			waiting = false
		default:
		}
		rep, err := f.sl.Reconcile(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Repaired {
			repairs++
		}
	}
	if repairs == 0 || sold.Load() != stock {
		t.Fatalf("%d repairs, %d sold; want a repair and %d sold", repairs, sold.Load(), stock)
	}
	f.record(ctx)
	if orders, left := f.sqlCounts(ctx); orders[statePending] != stock || len(orders) != 1 || left != 0 {
		t.Fatalf("SQL %v, stock %d; want %d pending, none rejected", orders, left, stock)
	}
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() || rep.RedisStock != 0 {
		t.Fatalf("after the sale: %+v, %v", rep, err)
	}
}

// With WaitReplicas, a purchase is answered once a replica has it, on every
// path (home bucket, another bucket, the batcher); with no replica to wait
// for, the buyer still gets the reservation, with ErrNotReplicated.
func TestWaitForReplicas(t *testing.T) {
	ctx := context.Background()
	t.Run("cluster", func(t *testing.T) {
		f := setup(t, testenv.NewRedisCluster(t), 12, 1, 4, seckill.Config{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
		for i := range 8 { // one home bucket: most take from another
			if _, err := f.sl.Buy(ctx, userOn(f.sl, 0, fmt.Sprintf("h%d-", i)), 1); err != nil {
				t.Fatal(err)
			}
		}
		b := f.sl.NewBatcher(seckill.BatchConfig{})
		defer b.Close()
		for i := range 5 {
			_, err := b.Buy(ctx, fmt.Sprintf("batched%d", i), 1)
			if (i < 4) != (err == nil) || i == 4 && !errors.Is(err, seckill.ErrSoldOut) {
				t.Fatalf("batched buyer %d: %v", i, err)
			}
		}
	})
	t.Run("no-replica", func(t *testing.T) {
		r, _ := testenv.NewPrivateRedis(t)
		f := setup(t, r, 8, 1, 1, seckill.Config{WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
		b := f.sl.NewBatcher(seckill.BatchConfig{})
		defer b.Close()
		for i, buy := range []func(string, int64) (string, error){
			func(u string, q int64) (string, error) { return f.sl.Buy(ctx, u, q) },
			func(u string, q int64) (string, error) { return b.Buy(ctx, u, q) },
		} {
			if id, err := buy(fmt.Sprint("u", i), 1); id == "" || !errors.Is(err, seckill.ErrNotReplicated) {
				t.Fatalf("buy %d without a replica: %q, %v; want the id and ErrNotReplicated", i, id, err)
			}
		}
		f.record(ctx)
		if orders, _ := f.sqlCounts(ctx); orders[statePending] != 2 {
			t.Fatalf("SQL %v, want the 2 unconfirmed purchases recorded", orders)
		}
	})
}

// After a buyer of one unit finds the campaign sold out, this process
// answers the crowd by itself for SoldOutFor — no rate-limit call, no
// script — and a unit that comes back sells again once the flag lapses.
func TestSoldOutFlag(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 1, 1, 1, seckill.Config{SoldOutFor: time.Second, UserLimit: redis_rate.PerMinute(1)})
	id, err := f.sl.Buy(ctx, "first", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sl.Buy(ctx, "second", 1); !errors.Is(err, seckill.ErrSoldOut) || !f.sl.SoldOut() {
		t.Fatalf("after the last unit: %v, flag %v", err, f.sl.SoldOut())
	}
	// Within the flag "second" asks again: a rate-limited user (1 a minute)
	// is told sold out, so neither the limiter nor the stock was asked.
	if _, err := f.sl.Buy(ctx, "second", 1); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("within the flag: %v, want ErrSoldOut from the flag", err)
	}
	f.deliver(ctx, nil)
	o, err := f.s.OrderOf(ctx, "first", id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	f.events(ctx)
	if left, _ := f.sl.RedisStock(ctx); left != 1 {
		t.Fatalf("the cancelled unit is not back: %d", left)
	}
	if _, err := f.sl.Buy(ctx, "third", 1); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("the unit came back within the flag: %v, want ErrSoldOut", err)
	}
	f.clk.Add(time.Second)
	if f.sl.SoldOut() {
		t.Fatal("the flag outlived SoldOutFor")
	}
	if _, err := f.sl.Buy(ctx, "third", 1); err != nil {
		t.Fatalf("after the flag: %v", err)
	}
}
