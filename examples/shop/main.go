// Command shop runs seed 004's e-commerce flash sale end to end: the Redis
// gate (Lua pre-deduction behind rate limits), Kafka shaving the write peak to
// what the databases take, orders in 8 databases × 8 tables with the final
// deduction in SQL, a payment channel that signs, retries, drops and
// duplicates its callbacks, the active query for lost callbacks, unpaid
// orders closed and restocked in Redis and SQL, fulfilment, and the day's
// reconciliation against the channel's statement.
//
//	go run ./examples/shop          # 2,000 buyers for 100 units, about 20 s
//	go run ./examples/shop -load    # 20,000 buyers for 1,000 units, under a minute
//	go run ./examples/shop -serve   # the shop and the channel, until Ctrl-C
//
// It ends with a balance sheet and exits 1 if any line is off.
//
// Embedded defaults: a spawned Redis Cluster (or CASEBOOK_REDIS_CLUSTER /
// CASEBOOK_REDIS_ADDR), kfake (or CASEBOOK_KAFKA_BROKERS), 8 SQLite files (or
// 8 databases on CASEBOOK_MYSQL_DSN's server).
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/examples/shop/paychan"
	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/seckill"
)

// Options is one run.
type Options struct {
	Buyers, Units int
	Unpaid        float64       // winners who never pay
	Late          float64       // winners who pay at the channel after their deadline
	PayTimeout    time.Duration // compressed from the seed's 30 minutes
	WriteRate     int           // orders/s the consumer writes
	Drop, Dup     float64       // callbacks the channel drops, duplicates
	Concurrency   int           // buyers in flight at once
	Serve         string        // listen here and serve until interrupted
	Out           io.Writer

	// For tests: the channel's signing key (nil: a fresh one), and what to
	// do when a third of the units are sold (a failover), run beside the
	// sale.
	ChannelKey *rsa.PrivateKey
	MidSale    func()
	// Now is the clock of every part — the order service, the gate, the
	// campaign's window, the channel's signatures, the sessions [time.Now].
	// Tests pass their own, so that the shop and its callers agree.
	Now func() time.Time
}

func main() {
	o := Options{Out: os.Stdout}
	load := flag.Bool("load", false, "the seed's load: 20,000 buyers for 1,000 units")
	flag.IntVar(&o.Buyers, "buyers", 2000, "buyers")
	flag.IntVar(&o.Units, "units", 100, "units on sale")
	flag.Float64Var(&o.Unpaid, "unpaid", 0.3, "fraction of winners who never pay")
	flag.Float64Var(&o.Late, "late", 0.02, "fraction of winners who pay after their deadline (refunded)")
	flag.DurationVar(&o.PayTimeout, "pay-timeout", 8*time.Second, "how long a reservation waits for payment (the seed's 30m, compressed)")
	flag.IntVar(&o.WriteRate, "write-rate", 2000, "orders/s the Kafka consumer writes (the seed's 2,000)")
	flag.Float64Var(&o.Drop, "drop", 0.1, "fraction of callbacks the channel drops")
	flag.Float64Var(&o.Dup, "dup", 0.05, "fraction of callbacks the channel sends twice")
	flag.IntVar(&o.Concurrency, "concurrency", 256, "buyers in flight at once")
	flag.StringVar(&o.Serve, "serve", "", "serve the shop on this address (e.g. 127.0.0.1:8080) until interrupted, no load")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "shop: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *load {
		o.Buyers, o.Units, o.PayTimeout = 20_000, 1000, 30*time.Second
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(2)
	}
	devstack.Run(func(ctx context.Context) error {
		st, err := devstack.OpenSharded(ctx, devstack.FromEnv(), "casebook_shop", 8, os.Stderr)
		if err != nil {
			return err
		}
		defer st.Close()
		sheet, err := Run(ctx, BackendsOf(st), o)
		if err != nil {
			return err
		}
		if !sheet.OK() {
			return errors.New("the books do not balance")
		}
		return nil
	})
}

func (o Options) validate() error {
	switch {
	case o.Buyers < 1 || o.Units < 1 || o.Units > o.Buyers:
		return fmt.Errorf("-buyers %d and -units %d: at least one unit, no more units than buyers", o.Buyers, o.Units)
	case o.Unpaid < 0 || o.Late < 0 || o.Unpaid+o.Late > 1 || o.Drop < 0 || o.Drop > 1 || o.Dup < 0 || o.Dup > 1:
		return fmt.Errorf("-unpaid, -late, -drop and -dup are fractions (unpaid + late ≤ 1)")
	case o.PayTimeout < time.Second:
		return fmt.Errorf("-pay-timeout %v below 1s", o.PayTimeout)
	case o.WriteRate < 1 || o.Concurrency < 1:
		return fmt.Errorf("-write-rate and -concurrency must be positive")
	}
	return nil
}

// Env is a running shop: its blocks, servers and workers.
type Env struct {
	Shop     *Shop
	Sale     *seckill.Sale
	Channel  *paychan.Channel
	Workers  *Workers
	URL      string // the shop's
	Campaign string
	SKU      string
	stop     func()
	now      func() time.Time // Options.Now
}

// Close stops the workers and the servers.
func (e *Env) Close() { e.stop() }

// Backends are the servers a shop runs on.
type Backends struct {
	Redis   redis.UniversalClient
	DBs     []*sqlx.DB // 8, for 8 × 8 order tables
	Brokers []string
	About   string // what they are, for the first line of output
}

// BackendsOf is st as Backends.
func BackendsOf(st *devstack.Stack) Backends {
	return Backends{Redis: st.Redis.Client, DBs: st.DBs(), Brokers: st.Kafka.Brokers,
		About: fmt.Sprintf("8 databases × 8 tables on %s (%s … %s), %s Redis (%d nodes), %s Kafka",
			st.SQLs[0].Kind, st.SQLs[0].Name, st.SQLs[7].Name, st.Redis.Kind, len(st.Redis.Addrs), st.Kafka.Kind)}
}

// Start wires the blocks on b and starts the shop's server, the payment
// channel's server and the workers.
func Start(ctx context.Context, b Backends, o Options) (_ *Env, err error) {
	var cleanup []func()
	stop := func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	rdb, dbs := b.Redis, b.DBs
	ns := "casebook-shop-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cleanup = append(cleanup, func() { devstack.DeleteKeys(context.WithoutCancel(ctx), rdb, ns+"*") })
	suffix := ns[len(ns)-6:]

	now := o.Now
	if now == nil {
		now = time.Now
	}
	tel, err := newTelemetry()
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, tel.close)
	orders, err := order.New(rdb, dbs, order.Config{Namespace: ns, PayTimeout: o.PayTimeout, Now: now, MeterProvider: tel.mp})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { orders.Close() })
	if err := orders.Migrate(ctx); err != nil {
		return nil, err
	}
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1, Checkpoint: idgen.NewRedisCheckpoint(rdb, ns+":snowflake:1")})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { ids.Close() })
	gate, err := seckill.New(rdb, dbs[0], orders, seckill.Config{
		Namespace: ns, IDs: ids, PayTimeout: o.PayTimeout, RetryWindow: o.PayTimeout / 4, Now: now,
		UserLimit: redis_rate.PerSecond(5), GlobalLimit: redis_rate.PerSecond(100_000),
		MeterProvider: tel.mp,
	})
	if err != nil {
		return nil, err
	}
	if err := gate.Migrate(ctx); err != nil {
		return nil, err
	}
	campaign, sku := "double11-"+suffix, "phone-"+suffix
	sale, err := gate.Create(ctx, seckill.Campaign{ID: campaign, SKU: sku, Price: 399900, Stock: int64(o.Units), Limit: 1, Buckets: 8,
		Starts: now().Add(-time.Second), Ends: now().Add(24 * time.Hour)})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { gate.Close() })
	cat, err := newCatalog(ctx, dbs[0], rdb, orders, ns, tel)
	if err != nil {
		return nil, err
	}
	if err := cat.put(ctx, Product{SKU: sku, Name: "Phone 128 GB", Description: "the Double 11 flash-sale phone"}); err != nil {
		return nil, err
	}
	batcher := sale.NewBatcher(seckill.BatchConfig{})
	cleanup = append(cleanup, func() { batcher.Close() })
	sessionKey := make([]byte, 32) // a real shop shares its login service's key
	if _, err := rand.Read(sessionKey); err != nil {
		return nil, err
	}
	shop := &Shop{rdb: rdb, orders: orders, gate: gate, catalog: cat, ns: ns, idemTTL: 24 * time.Hour,
		sales: map[string]*seckill.Sale{campaign: sale}, batchers: map[string]*seckill.Batcher{campaign: batcher},
		sessions: sessions{key: sessionKey, now: now}, tel: tel}

	addr := o.Serve
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	url := "http://" + ln.Addr().String()
	ch, err := paychan.New(paychan.Config{NotifyURL: url + "/pay/notify", Key: o.ChannelKey, DropRate: o.Drop, DupRate: o.Dup,
		Scale: 1e-4, Jitter: 20 * time.Millisecond, Seed: uint64(time.Now().UnixNano()), Now: now})
	if err != nil {
		ln.Close()
		return nil, err
	}
	if err := ch.Start("127.0.0.1:0"); err != nil {
		ln.Close()
		return nil, err
	}
	cleanup = append(cleanup, func() { ch.Close() })
	shop.notify = orders.CallbackHandler(order.RSAVerifier{Key: ch.PublicKey(), Now: now})
	srv := devstack.Server("", shop.Handler())
	go srv.Serve(ln)
	cleanup = append(cleanup, func() { srv.Close() })

	ordersTopic, eventsTopic := ns+".orders", ns+".order-events"
	for _, t := range []string{ordersTopic, eventsTopic} {
		if err := kafka.CreateTopic(b.Brokers, t, 8); err != nil {
			return nil, err
		}
	}
	pub, err := kafka.Dial(b.Brokers, "shop-relay")
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { pub.Close() })
	w := &Workers{shop: shop, sale: sale, brokers: b.Brokers, pub: pub, channel: ch.Client(),
		ordersTopic: ordersTopic, eventsTopic: eventsTopic,
		cfg: WorkerConfig{WriteRate: o.WriteRate, Tick: 100 * time.Millisecond, QueryWithin: o.PayTimeout / 4}}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	w.joined.Add(3)
	go func() { done <- w.Run(wctx) }()
	cleanup = append(cleanup, func() { cancel(); <-done })
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if err := w.Ready(rctx); err != nil {
		return nil, err
	}
	return &Env{Shop: shop, Sale: sale, Channel: ch, Workers: w, URL: url, Campaign: campaign, SKU: sku, stop: stop, now: now}, nil
}

// Run starts a shop on b and either serves it (o.Serve) or drives the load
// through it and returns the balance sheet.
func Run(ctx context.Context, b Backends, o Options) (*Sheet, error) {
	env, err := Start(ctx, b, o)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	fmt.Fprintf(o.Out, "shop %s, payment channel %s; %s\n", env.URL, env.Channel.URL(), b.About)
	if o.Serve != "" {
		fmt.Fprintf(o.Out, "try: curl %s/products/%s\n     curl -H 'Authorization: Bearer %s' -d '{}' %s/seckill/%s/buy\n",
			env.URL, env.SKU, env.Shop.Token("me", 24*time.Hour), env.URL, env.Campaign)
		<-ctx.Done()
		return &Sheet{}, nil
	}
	return Load(ctx, env, o)
}
