// Command hotlist runs a Weibo-style hot list end to end: a generator writes
// a Zipf-distributed stream of views, likes, reposts and comments to Kafka,
// two aggregators in one consumer group flush them into a Redis Cluster
// exactly once, a publisher stores the top 100 every few seconds, and an
// HTTP server answers GET /hot?n=50 from each process's cached copy.
//
//	go run ./examples/hotlist                      # until Ctrl-C; curl 'localhost:8080/hot?n=10'
//	go run ./examples/hotlist -duration 10s        # prints the top 10 and exits (CI)
//
// Embedded defaults: franz-go's in-process kfake Kafka and a spawned Redis
// Cluster (one embedded Redis without the redis-server binary). Real
// servers: CASEBOOK_KAFKA_BROKERS, CASEBOOK_REDIS_CLUSTER or
// CASEBOOK_REDIS_ADDR.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/hotlist/hotkafka"
	"github.com/casebook-dev/casebook/kafka"
)

type options struct {
	addr       string
	duration   time.Duration
	partitions int
	rate       int
	items      int
	model      string
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "HTTP listen address")
	flag.DurationVar(&o.duration, "duration", 0, "exit after this long, printing the top 10 (0: run until interrupted)")
	flag.IntVar(&o.partitions, "partitions", 16, "Kafka partitions (one Redis hash tag each)")
	flag.IntVar(&o.rate, "rate", 100_000, "events per second the generator writes")
	flag.IntVar(&o.items, "items", 1_000_000, "distinct items the events are spread over (Zipf, s = 1.1)")
	flag.StringVar(&o.model, "model", "decay", "heat model: decay (half-life 1 h) or window (12 × 5 min)")
	flag.Parse()
	devstack.Run(func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	model := hotlist.Decay
	switch o.model {
	case "decay":
	case "window":
		model = hotlist.Window
	default:
		return fmt.Errorf("unknown model %q", o.model)
	}
	st, err := devstack.Open(ctx, devstack.FromEnv(), "casebook_hotlist", os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r, k := st.Redis, st.Kafka
	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*") // leave nothing behind on a real server
	topic := "hotlist-events-" + ns
	if err := kafka.CreateTopic(k.Brokers, topic, int32(o.partitions)); err != nil {
		return err
	}
	defer kafka.DeleteTopic(k.Brokers, topic)

	list, err := hotlist.New(r.Client, hotlist.Config{Name: "weibo", Namespace: ns, Partitions: o.partitions, Model: model, Refresh: 2 * time.Second})
	if err != nil {
		return err
	}
	fmt.Printf("hot list %q (%v): %d partitions, %s Redis (%d node(s)), %s Kafka; generating %d events/s over %d items\n",
		"weibo", model, o.partitions, r.Kind, len(r.Addrs), k.Kind, o.rate, o.items)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	var produced atomic.Int64
	g.Go(func() error { return generate(ctx, k.Brokers, topic, o, &produced) })
	var aggs []*hotlist.Aggregator
	for i := range 2 { // two consumer processes of one group
		agg, err := hotlist.NewAggregator(list, hotlist.AggregatorConfig{})
		if err != nil {
			return err
		}
		aggs = append(aggs, agg)
		g.Go(func() error { return aggregate(ctx, k.Brokers, topic, "hotlist-"+ns, i, agg) })
	}
	g.Go(func() error {
		list.RunPublisher(ctx, func(err error) { log.Print(err) })
		return nil
	})
	srv := &http.Server{
		Handler:           hotHandler(list),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    1 << 16,
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	fmt.Printf("serving http://%s/hot?n=50\n", ln.Addr())
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		if o.duration > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(o.duration):
				if err := printTop(ctx, list, produced.Load(), aggs); err != nil {
					return err
				}
			}
		} else {
			<-ctx.Done()
		}
		cancel()
		shutdown, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer done()
		return srv.Shutdown(shutdown)
	})
	return g.Wait()
}

// generate writes events at o.rate, Zipf-distributed over o.items items,
// batched per partition (500 events a message) so that each message's key
// routes it to the partition of every item in it.
func generate(ctx context.Context, brokers []string, topic string, o options, produced *atomic.Int64) error {
	pub, err := kafka.Dial(brokers, "hotlist-generator")
	if err != nil {
		return err
	}
	defer pub.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(o.items-1))
	const tick = 100 * time.Millisecond
	perTick := max(1, o.rate/int(time.Second/tick))
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		events := make([]hotlist.Event, perTick)
		now := time.Now()
		for i := range events {
			events[i] = hotlist.Event{Item: "post:" + strconv.FormatUint(zipf.Uint64(), 10), Kind: kind(rng), At: now, User: "u" + strconv.Itoa(rng.IntN(10_000_000))}
		}
		msgs, err := hotlist.EncodeMessages(topic, o.partitions, 500, events)
		if err != nil {
			return err
		}
		if err := pub.Publish(ctx, msgs); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		produced.Add(int64(len(events)))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// kind draws an interaction: mostly views, some likes, few reposts and
// comments.
func kind(rng *rand.Rand) hotlist.Kind {
	switch n := rng.IntN(100); {
	case n < 80:
		return hotlist.View
	case n < 95:
		return hotlist.Like
	case n < 98:
		return hotlist.Repost
	}
	return hotlist.Comment
}

// aggregate runs one consumer process of the group.
func aggregate(ctx context.Context, brokers []string, topic, group string, i int, agg *hotlist.Aggregator) error {
	cg, err := sarama.NewConsumerGroup(brokers, group, kafka.Config(group+"-"+strconv.Itoa(i)))
	if err != nil {
		return err
	}
	defer cg.Close()
	c, err := hotkafka.New(cg, topic, agg, hotkafka.Config{
		OnReject: func(p int32, off int64, err error) { log.Printf("partition %d offset %d: %v", p, off, err) },
		OnError:  func(err error) { log.Print(err) },
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// hotItem is one entry of GET /hot.
type hotItem struct {
	Rank   int     `json:"rank"`
	Item   string  `json:"item"`
	Heat   float64 `json:"heat"`
	Change int     `json:"change"`
	New    bool    `json:"new,omitempty"`
	Pinned bool    `json:"pinned,omitempty"`
}

// hotHandler answers GET /hot?n=50 (1..100) with the cached list as JSON.
func hotHandler(list *hotlist.List) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hot", func(w http.ResponseWriter, req *http.Request) {
		n := 50
		if s := req.URL.Query().Get("n"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 || v > 100 {
				http.Error(w, "n must be 1..100", http.StatusBadRequest)
				return
			}
			n = v
		}
		top, err := list.TopCached(req.Context(), n)
		if errors.Is(err, hotlist.ErrNoSnapshot) {
			w.Header().Set("Retry-After", "2")
			http.Error(w, "no list published yet", http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			log.Print(err)
			http.Error(w, "list unavailable", http.StatusServiceUnavailable)
			return
		}
		out := make([]hotItem, len(top))
		for i, e := range top {
			out[i] = hotItem{Rank: e.Rank, Item: e.Item, Heat: e.Heat, Change: e.Change, New: e.New, Pinned: e.Pinned}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=1")
		json.NewEncoder(w).Encode(map[string]any{"items": out})
	})
	return mux
}

func printTop(ctx context.Context, list *hotlist.List, produced int64, aggs []*hotlist.Aggregator) error {
	snap, err := list.Publish(ctx)
	if errors.Is(err, hotlist.ErrPublishConflict) {
		snap, err = list.Snapshot(ctx)
	}
	if err != nil {
		return err
	}
	var aggregated, flushes int64
	for _, a := range aggs {
		s := a.Stats()
		aggregated += s.Events
		flushes += s.Flushes
	}
	fmt.Printf("%d events generated, %d aggregated, %d flushes; top 10 at %s:\n", produced, aggregated, flushes, snap.At.Format(time.TimeOnly))
	for _, e := range snap.Entries[:min(10, len(snap.Entries))] {
		fmt.Printf("  #%-2d %-12s heat %10.2f\n", e.Rank, e.Item, e.Heat)
	}
	return nil
}
