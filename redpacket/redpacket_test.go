package redpacket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var start = testenv.Now().UTC().Truncate(time.Hour)

type fixture struct {
	t   testing.TB
	s   *redpacket.Service
	r   *testenv.Redis
	dbs []*sqlx.DB
	clk *testenv.Clock
}

// setup gives a service on 4 databases × 2 tables and the given Redis.
func setup(t *testing.T, r *testenv.Redis, cfg redpacket.Config) *fixture {
	t.Helper()
	return setupOn(t, r, testenv.NewSQLs(t, 4), cfg)
}

// setupOn gives a service on dbs (4 databases) and r.
func setupOn(t *testing.T, r *testenv.Redis, dbs []*sqlx.DB, cfg redpacket.Config) *fixture {
	t.Helper()
	clk := testenv.NewClock(start)
	cfg.Namespace, cfg.Now, cfg.TablesPerDB = r.Namespace, clk.Now, 2
	cfg.Buckets = max(cfg.Buckets, 16)
	s, err := redpacket.New(r.Client, dbs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, s: s, r: r, dbs: dbs, clk: clk}
}

func (f *fixture) send(sender string, total int64, count int, kind redpacket.Kind) redpacket.Packet {
	f.t.Helper()
	ctx := context.Background()
	if err := f.s.Deposit(ctx, sender, total); err != nil {
		f.t.Fatal(err)
	}
	p, err := f.s.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: fmt.Sprint("send-", total, "-", count, "-", rand.Int()), Total: total, Count: count, Kind: kind})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// deliver relays the claim outbox (through pub: nil means a real Kafka
// producer) and has Handle consume it; it returns the messages settled.
func (f *fixture) deliver(pub outbox.Publisher) int64 {
	f.t.Helper()
	ctx := context.Background()
	brokers := testenv.Kafka(f.t)
	topic := testenv.Topic(f.t, 4)
	if pub == nil {
		p, err := kafka.Dial(brokers, "rp-test")
		if err != nil {
			f.t.Fatal(err)
		}
		defer p.Close()
		pub = p
	}
	counted := &counting{p: pub}
	relay := outbox.NewRelay(f.r.Client, f.s.Outboxes(), topic, counted)
	for range 10 {
		relay.DrainAll(ctx)
		if left, _ := relay.Pending(ctx); left == 0 {
			break
		}
	}
	relayed := counted.n // duplicates of a lost acknowledgement included
	if relayed == 0 {
		return 0
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := kafka.ConsumeN(cctx, brokers, "claims-"+topic, []string{topic}, int64(relayed), f.s.Handle, kafka.ConsumerConfig{})
	if err != nil || c.Handled()+c.Poisoned() != int64(relayed) {
		f.t.Fatalf("consumed %d+%d of %d: %v", c.Handled(), c.Poisoned(), relayed, err)
	}
	return int64(relayed)
}

// counting counts the messages a publisher accepted.
type counting struct {
	p outbox.Publisher
	n int
}

func (c *counting) Publish(ctx context.Context, ms []outbox.Message) error {
	err := c.p.Publish(ctx, ms)
	if err == nil || err.Error() == errCrash.Error() {
		c.n += len(ms)
	}
	return err
}

var errCrash = errors.New("relay killed after the ack")

// balanced checks the books: the debit equals claims + refunds + what is
// still open, and receivers were credited exactly what the ledgers hold.
func (f *fixture) balanced() redpacket.Books {
	f.t.Helper()
	b, err := f.s.Audit(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	if b.Debited != b.Claimed+b.Refunded+b.Open || b.Credited != b.Claimed {
		f.t.Fatalf("books do not balance: %+v", b)
	}
	return b
}

// Many packets, each with a crowd of concurrent openers (several opening
// twice; some packets have more shares than openers): every packet's
// shares are exact to the fen, nobody gets two shares of one packet, no
// share is 0 or reaches twice the mean of what was left at its draw; after
// the relay the SQL ledger equals Redis, and the expiry refunds are exactly
// what the openers left, so the books balance.
func TestConcurrentOpensExact(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		f := setup(t, r, redpacket.Config{})
		rng := rand.New(rand.NewPCG(1, 2))
		const packets, openers = 40, 300
		var ps []redpacket.Packet
		for i := range packets {
			count := 1 + rng.IntN(120)
			if i%8 == 0 { // more shares than openers: partly claimed, refunded
				count = openers + 1 + rng.IntN(200)
			}
			ps = append(ps, f.send(fmt.Sprint("sender", i%7), int64(count)+rng.Int64N(50_000), count, redpacket.Random))
		}
		got := make([]map[string]int64, packets) // packet → user → share
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				var reqs []redpacket.OpenRequest
				for u := g; u < openers; u += 16 {
					for i, p := range ps {
						user := fmt.Sprint("u", u)
						reqs = append(reqs, redpacket.OpenRequest{Packet: p.ID, User: user})
						if (u+i)%10 == 0 { // open twice: must get the same share
							reqs = append(reqs, redpacket.OpenRequest{Packet: p.ID, User: user})
						}
					}
				}
				rand.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
				for len(reqs) > 0 {
					n := min(len(reqs), 500)
					res := f.s.OpenMany(ctx, reqs[:n])
					mu.Lock()
					for k, r := range res {
						idx := -1
						for i, p := range ps {
							if p.ID == reqs[k].Packet {
								idx = i
							}
						}
						switch {
						case r.Err == nil:
							if got[idx] == nil {
								got[idx] = map[string]int64{}
							}
							if prev, ok := got[idx][reqs[k].User]; ok && prev != r.Amount {
								t.Errorf("%s got %d then %d of packet %d", reqs[k].User, prev, r.Amount, reqs[k].Packet)
							}
							got[idx][reqs[k].User] = r.Amount
						case errors.Is(r.Err, redpacket.ErrEmpty):
						default:
							t.Error(r.Err)
						}
					}
					mu.Unlock()
					reqs = reqs[n:]
				}
			})
		}
		wg.Wait()
		claimed := make([]int64, packets) // what the openers took: the first shares drawn
		var refunds int64
		for i, p := range ps {
			var shares []int64
			if err := json.Unmarshal([]byte(p.Shares), &shares); err != nil {
				t.Fatal(err)
			}
			n := min(p.Count, openers)
			for _, v := range shares[:n] {
				claimed[i] += v
			}
			refunds += p.Total - claimed[i]
			var sum int64
			for _, v := range got[i] {
				if v < 1 {
					t.Fatalf("packet %d: a share of %d", p.ID, v)
				}
				sum += v
			}
			if sum != claimed[i] || len(got[i]) != n {
				t.Fatalf("packet %d: %d shares summing to %d, want %d summing to %d", p.ID, len(got[i]), sum, n, claimed[i])
			}
		}
		if refunds == 0 {
			t.Fatal("every packet was used up: no refund to check")
		}
		f.deliver(nil)
		for i, p := range ps {
			d, err := f.s.Detail(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Claims) != len(got[i]) || d.Packet.ClaimedAmount != claimed[i] || d.Luckiest == nil {
				t.Fatalf("packet %d: SQL has %d claims, %d fen; Redis gave %d, %d fen", p.ID, len(d.Claims), d.Packet.ClaimedAmount, len(got[i]), claimed[i])
			}
			left := p.Total // before the claim's draw
			for k, c := range d.Claims {
				if got[i][c.User] != c.Amount {
					t.Fatalf("packet %d: SQL says %s got %d, Redis said %d", p.ID, c.User, c.Amount, got[i][c.User])
				}
				if c.Index != k+1 || c.Amount*int64(p.Count-k) >= 2*left {
					t.Fatalf("packet %d: draw %d (index %d) of %d fen with %d fen left for %d shares: not below twice the mean", p.ID, k+1, c.Index, c.Amount, left, p.Count-k)
				}
				left -= c.Amount
			}
		}
		f.clk.Add(25 * time.Hour)
		if n, fenced, err := f.s.RefundDue(ctx, 1000); err != nil || fenced != 0 || n != packets {
			t.Fatalf("refunded %d, fenced %d: %v", n, fenced, err)
		}
		for i, p := range ps {
			if got, err := f.s.Get(ctx, p.ID); err != nil || got.Refund != p.Total-claimed[i] {
				t.Fatalf("packet %d refunded %d, want %d: %v", p.ID, got.Refund, p.Total-claimed[i], err)
			}
		}
		if b := f.balanced(); b.Refunded != refunds || b.Open != 0 {
			t.Fatalf("refunded %d, want %d; %d open", b.Refunded, refunds, b.Open)
		}
	})
}

// A packet half claimed refunds the rest from the ledger, after the fence
// lets it: not before expiry, not while claims are on their way.
func TestRefundFence(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	p := f.send("boss", 10_000, 10, redpacket.Random)
	var opened int64
	for u := range 4 {
		v, err := f.s.Open(ctx, p.ID, fmt.Sprint("u", u))
		if err != nil {
			t.Fatal(err)
		}
		opened += v
	}
	if _, err := f.s.Refund(ctx, p.ID); !errors.Is(err, redpacket.ErrNotExpired) {
		t.Fatalf("refund before expiry: %v", err)
	}
	f.clk.Add(24 * time.Hour)
	if _, err := f.s.Open(ctx, p.ID, "late"); !errors.Is(err, redpacket.ErrExpired) {
		t.Fatalf("open after expiry: %v", err)
	}
	if _, err := f.s.Refund(ctx, p.ID); !errors.Is(err, redpacket.ErrFence) {
		t.Fatalf("refund with claims still in Redis only: %v", err)
	}
	f.deliver(nil)
	for range 2 {
		refund, err := f.s.Refund(ctx, p.ID)
		if err != nil || refund != 10_000-opened {
			t.Fatalf("refund %d (%v), want %d", refund, err, 10_000-opened)
		}
	}
	if bal, _ := f.s.Balance(ctx, "boss"); bal != 10_000-opened {
		t.Fatalf("sender balance %d, want the refund %d once", bal, 10_000-opened)
	}
	f.balanced()
}

// Bad input is refused with a sentinel and writes nothing.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	f.s.Deposit(ctx, "rich", 1_000_000)
	for name, r := range map[string]redpacket.SendRequest{
		"zero":           {Total: 0, Count: 1},
		"negative":       {Total: -5, Count: 1},
		"count 0":        {Total: 100, Count: 0},
		"count too big":  {Total: 100_000, Count: 501},
		"fewer fen":      {Total: 9, Count: 10},
		"too much":       {Total: 2_000_001, Count: 1},
		"fixed uneven":   {Total: 10, Count: 3, Kind: redpacket.Fixed},
		"unknown kind":   {Total: 10, Count: 1, Kind: "lucky"},
		"bad recipient":  {Total: 10, Count: 1, Recipient: "a b"},
		"no request id":  {Total: 10, Count: 1, RequestID: "-"},
		"bad sender":     {Total: 10, Count: 1, Sender: "ünï"},
		"long greeting":  {Total: 10, Count: 1, Greeting: string(make([]byte, 256))},
		"insufficient":   {Total: 10, Count: 1, Sender: "poor"},
		"still too poor": {Total: 1_000_001, Count: 500},
	} {
		if r.Sender == "" {
			r.Sender = "rich"
		}
		if r.RequestID == "" {
			r.RequestID = "r-" + name[:3]
		} else if r.RequestID == "-" {
			r.RequestID = ""
		}
		_, err := f.s.Send(ctx, r)
		want := redpacket.ErrInvalid
		if name == "insufficient" || name == "still too poor" {
			want = redpacket.ErrInsufficientFunds
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	if bal, _ := f.s.Balance(ctx, "rich"); bal != 1_000_000 {
		t.Fatalf("refused sends moved money: balance %d", bal)
	}
	if b := f.balanced(); b.Debited != 0 {
		t.Fatalf("refused sends recorded packets: %+v", b)
	}
	if _, err := f.s.Open(ctx, 12345, "x"); !errors.Is(err, redpacket.ErrNotFound) {
		t.Fatalf("unknown packet: %v", err)
	}
	p, err := f.s.Send(ctx, redpacket.SendRequest{Sender: "rich", RequestID: "private", Total: 500, Count: 1, Recipient: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Grab(ctx, p.ID, "rich"); !errors.Is(err, redpacket.ErrNotRecipient) {
		t.Fatalf("sender grabbing an exclusive packet: %v", err)
	}
	if _, err := f.s.Open(ctx, p.ID, "rich"); !errors.Is(err, redpacket.ErrNotRecipient) {
		t.Fatalf("sender opening an exclusive packet: %v", err)
	}
	if err := f.s.Grab(ctx, p.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if v, err := f.s.Open(ctx, p.ID, "alice"); v != 500 || err != nil {
		t.Fatalf("recipient: %d %v", v, err)
	}
	if err := f.s.Grab(ctx, p.ID, "alice"); !errors.Is(err, redpacket.ErrAlreadyClaimed) {
		t.Fatalf("grab after claim: %v", err)
	}
	again, err := f.s.Send(ctx, redpacket.SendRequest{Sender: "rich", RequestID: "private", Total: 500, Count: 1, Recipient: "alice"})
	if err != nil || again.ID != p.ID {
		t.Fatalf("repeated send made %d (was %d): %v", again.ID, p.ID, err)
	}
	if bal, _ := f.s.Balance(ctx, "rich"); bal != 1_000_000-500 {
		t.Fatalf("a repeated send debited twice: %d", bal)
	}
	f.clk.Add(24 * time.Hour)
	if _, err := f.s.Open(ctx, p.ID, "alice"); err != nil {
		t.Fatalf("the holder reopening after expiry sees their share: %v", err)
	}
}

// crashAfterPublish publishes, then reports failure once, as a relay killed
// between the broker's ack and its XDEL.
type crashAfterPublish struct {
	p       outbox.Publisher
	crashes int
}

func (c *crashAfterPublish) Publish(ctx context.Context, ms []outbox.Message) error {
	if err := c.p.Publish(ctx, ms); err != nil {
		return err
	}
	if c.crashes > 0 {
		c.crashes--
		return errCrash
	}
	return nil
}

// A relay killed between ack and delete, and a full replay of the topic,
// credit nothing twice.
func TestRelayCrashAndReplayCreditOnce(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	p := f.send("boss", 5000, 50, redpacket.Random)
	for u := range 50 {
		if _, err := f.s.Open(ctx, p.ID, fmt.Sprint("u", u)); err != nil {
			t.Fatal(err)
		}
	}
	pub, err := kafka.Dial(testenv.Kafka(t), "crashy")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if n := f.deliver(&crashAfterPublish{p: pub, crashes: 1}); n <= 50 {
		t.Fatalf("relayed %d: the crash was not exercised", n)
	}
	b := f.balanced()
	if b.Claimed != 5000 {
		t.Fatalf("claimed %d after duplicates, want 5000", b.Claimed)
	}
	// Replay every claim message once more, straight into the handler.
	d, _ := f.s.Detail(ctx, p.ID)
	for _, c := range d.Claims {
		msg := fmt.Sprintf(`{"v":1,"packet":%d,"user":%q,"amount":%d,"index":%d,"at":%d}`, c.Packet, c.User, c.Amount, c.Index, c.ClaimedAt)
		if err := f.s.Handle(ctx, nil, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if b := f.balanced(); b.Credited != 5000 {
		t.Fatalf("replay credited %d, want 5000", b.Credited)
	}
	for _, bad := range []string{`nope`, `{"v":2}`, `{"v":1,"packet":1,"user":"x","amount":0,"index":1,"at":0}`} {
		if err := f.s.Handle(ctx, nil, []byte(bad)); !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrBadMessage) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// A redis-server with AOF (everysec) SIGKILLed and restarted while a crowd
// opens: whatever the last second lost, no money is created or lost — the
// books balance after the relay and the refunds.
func TestRedisCrashMidGrab(t *testing.T) {
	ctx := context.Background()
	r, srv := testenv.NewPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "everysec")
	f := setup(t, r, redpacket.Config{})
	var ps []redpacket.Packet
	for i := range 20 {
		ps = append(ps, f.send(fmt.Sprint("s", i), 10_000, 100, redpacket.Random))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			for u := g; ; u += 8 {
				select {
				case <-stop:
					return
				default:
				}
				var reqs []redpacket.OpenRequest
				for _, p := range ps {
					reqs = append(reqs, redpacket.OpenRequest{Packet: p.ID, User: fmt.Sprint("u", u)})
				}
				f.s.OpenMany(ctx, reqs) // errors while the server is down are expected
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	f.deliver(nil)
	f.clk.Add(26 * time.Hour) // past expiry and the lost-state grace
	if _, fenced, err := f.s.RefundDue(ctx, 1000); err != nil || fenced != 0 {
		t.Fatalf("refunds: %d fenced, %v", fenced, err)
	}
	b := f.balanced()
	if b.Open != 0 || b.Debited != 20*10_000 {
		t.Fatalf("after refunds: %+v", b)
	}
	t.Logf("books after a crash mid-grab: %+v", b)
}

// A Send whose Redis step fails after the SQL commit — Redis unreachable,
// or every reply lost on the way back — says so, has debited the sender
// once, and the same request sent again opens the packet and debits
// nothing more: no money is missing at any point.
func TestSendFailingHalfWayLosesNoMoney(t *testing.T) {
	ctx := context.Background()
	req := redpacket.SendRequest{Sender: "boss", RequestID: "half-way", Total: 6000, Count: 3}
	// sendHalfWay sends req with broken, then again with f once Redis is
	// back, and checks the money at each step.
	sendHalfWay := func(t *testing.T, f *fixture, broken *redpacket.Service, heal func()) {
		if err := f.s.Deposit(ctx, "boss", 10_000); err != nil {
			t.Fatal(err)
		}
		p, err := broken.Send(ctx, req)
		if err == nil || !strings.Contains(err.Error(), "recorded and paid for") || !strings.Contains(err.Error(), "same request id") || p.ID == 0 {
			t.Fatalf("send with Redis failing: packet %d, %v", p.ID, err)
		}
		if bal, _ := f.s.Balance(ctx, "boss"); bal != 4000 {
			t.Fatalf("balance %d after the half-way send, want 4000", bal)
		}
		if b := f.balanced(); b.Debited != 6000 || b.Open != 6000 {
			t.Fatalf("the paid packet is missing from the books: %+v", b)
		}
		heal()
		again, err := f.s.Send(ctx, req)
		if err != nil || again.ID != p.ID {
			t.Fatalf("retried send made %d (was %d): %v", again.ID, p.ID, err)
		}
		if bal, _ := f.s.Balance(ctx, "boss"); bal != 4000 {
			t.Fatalf("the retried send debited again: balance %d", bal)
		}
		var opened int64
		for u := range 3 {
			v, err := f.s.Open(ctx, p.ID, fmt.Sprint("u", u))
			if err != nil {
				t.Fatal(err)
			}
			opened += v
		}
		if opened != 6000 {
			t.Fatalf("the retried packet paid %d of 6000", opened)
		}
		f.deliver(nil)
		if b := f.balanced(); b.Debited != 6000 || b.Claimed != 6000 || b.Open != 0 {
			t.Fatalf("after the claims: %+v", b)
		}
	}
	t.Run("redis unreachable", func(t *testing.T) {
		r := testenv.NewRedis(t)
		dbs := testenv.NewSQLs(t, 4)
		closed := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		closed.Close()
		broken := setupOn(t, &testenv.Redis{Client: closed, Namespace: r.Namespace, Kind: r.Kind}, dbs, redpacket.Config{})
		f := setupOn(t, r, dbs, redpacket.Config{})
		sendHalfWay(t, f, broken.s, func() {
			p, _, _ := f.s.Sent(ctx, "boss", "", 1)
			if err := f.s.Grab(ctx, p[0].ID, "u0"); !errors.Is(err, redpacket.ErrNotFound) {
				t.Fatalf("the packet is open before the retry: %v", err)
			}
		})
	})
	t.Run("reply lost", func(t *testing.T) {
		r, proxy := testenv.NewFaultyRedis(t)
		f := setup(t, r, redpacket.Config{})
		proxy.DropReplies(10) // more than go-redis' retries: the call fails, though Redis may have acted
		sendHalfWay(t, f, f.s, func() { proxy.DropReplies(0) })
		if proxy.Cuts() == 0 {
			t.Fatal("no reply was lost")
		}
	})
}

// pageAll pages through a history n at a time and returns the pages' sizes
// and their items' packet ids in order.
func pageAll[T any](t *testing.T, n int, page func(cursor string, n int) ([]T, string, error), id func(T) int64) (sizes []int, ids []int64) {
	t.Helper()
	for cursor := ""; ; {
		items, next, err := page(cursor, n)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(items))
		for _, it := range items {
			ids = append(ids, id(it))
		}
		if next == "" {
			return sizes, ids
		}
		if len(sizes) > 100 {
			t.Fatal("the cursor never ends")
		}
		cursor = next
	}
}

// Sent and Received page by cursor through one user's history, newest
// first, without another user's rows; an exact last page is followed by
// an empty one that ends.
func TestHistoryPages(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	var newestFirst []int64
	got := map[int64]int64{} // packet → carol's share
	for range 7 {
		p := f.send("alice", 1000, 2, redpacket.Random)
		newestFirst = append([]int64{p.ID}, newestFirst...)
		f.send("bob", 1000, 2, redpacket.Random)
		v, err := f.s.Open(ctx, p.ID, "carol")
		if err != nil {
			t.Fatal(err)
		}
		got[p.ID] = v
	}
	f.deliver(nil)
	sent := func(cursor string, n int) ([]redpacket.Packet, string, error) {
		return f.s.Sent(ctx, "alice", cursor, n)
	}
	packetID := func(p redpacket.Packet) int64 { return p.ID }
	sizes, ids := pageAll(t, 3, sent, packetID)
	if fmt.Sprint(sizes) != "[3 3 1]" || fmt.Sprint(ids) != fmt.Sprint(newestFirst) {
		t.Fatalf("sent pages %v of %v, want [3 3 1] of %v", sizes, ids, newestFirst)
	}
	if sizes, ids = pageAll(t, 7, sent, packetID); fmt.Sprint(sizes) != "[7 0]" || len(ids) != 7 {
		t.Fatalf("sent in pages of 7: %v", sizes)
	}
	var received []redpacket.Claim
	sizes, ids = pageAll(t, 3, func(cursor string, n int) ([]redpacket.Claim, string, error) {
		cs, next, err := f.s.Received(ctx, "carol", cursor, n)
		received = append(received, cs...)
		return cs, next, err
	}, func(c redpacket.Claim) int64 { return c.Packet })
	if fmt.Sprint(sizes) != "[3 3 1]" || fmt.Sprint(ids) != fmt.Sprint(newestFirst) {
		t.Fatalf("received pages %v of %v, want [3 3 1] of %v", sizes, ids, newestFirst)
	}
	for _, c := range received {
		if c.User != "carol" || c.Amount != got[c.Packet] {
			t.Fatalf("received %+v, opened %d", c, got[c.Packet])
		}
	}
	if cs, next, err := f.s.Received(ctx, "alice", "", 10); len(cs) != 0 || next != "" || err != nil {
		t.Fatalf("alice received %v, %q, %v", cs, next, err)
	}
	for _, bad := range []struct {
		cursor string
		n      int
	}{{"", 0}, {"", 101}, {"!", 3}, {"-5", 3}} {
		if _, _, err := f.s.Sent(ctx, "alice", bad.cursor, bad.n); !errors.Is(err, redpacket.ErrInvalid) {
			t.Errorf("sent %+v: %v", bad, err)
		}
		if _, _, err := f.s.Received(ctx, "carol", bad.cursor, bad.n); !errors.Is(err, redpacket.ErrInvalid) {
			t.Errorf("received %+v: %v", bad, err)
		}
	}
}

// Archive moves refunded packets past the retention, batch at a time per
// table, while sends go on; afterwards Get, Detail, Sent and Audit find
// the archived packets as they were, and open packets stay hot.
func TestArchive(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	var old []redpacket.Packet
	for range 5 {
		p := f.send("alice", 4000, 4, redpacket.Random)
		for u := range 2 {
			if _, err := f.s.Open(ctx, p.ID, fmt.Sprint("u", u)); err != nil {
				t.Fatal(err)
			}
		}
		old = append(old, p)
	}
	f.deliver(nil)
	f.clk.Add(25 * time.Hour)
	if n, fenced, err := f.s.RefundDue(ctx, 100); n != 5 || fenced != 0 || err != nil {
		t.Fatalf("refunded %d, fenced %d: %v", n, fenced, err)
	}
	details := map[int64]redpacket.Detail{}
	for _, p := range old {
		d, err := f.s.Detail(ctx, p.ID)
		if err != nil || d.Packet.Status != redpacket.StatusRefunded || d.Packet.Refund == 0 {
			t.Fatalf("before archive: %+v, %v", d.Packet, err)
		}
		details[p.ID] = d
	}
	hot := f.send("alice", 1000, 2, redpacket.Random) // open: stays
	books := f.balanced()

	// Alice sends on while her refunded packets, all in her shard's table,
	// move two at a time.
	const during = 10
	if err := f.s.Deposit(ctx, "alice", during*100); err != nil {
		t.Fatal(err)
	}
	sends := make(chan error, during)
	go func() {
		for i := range during {
			_, err := f.s.Send(ctx, redpacket.SendRequest{Sender: "alice", RequestID: fmt.Sprint("during-", i), Total: 100, Count: 1})
			sends <- err
		}
		close(sends)
	}()
	var moved []int
	for {
		n, err := f.s.Archive(ctx, f.clk.Now(), 2)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, n)
		if n == 0 {
			break
		}
	}
	if fmt.Sprint(moved) != "[2 2 1 0]" {
		t.Fatalf("archive batches moved %v, want [2 2 1 0]", moved)
	}
	for err := range sends {
		if err != nil {
			t.Fatalf("a send during the archive: %v", err)
		}
	}

	for _, p := range old {
		d, err := f.s.Detail(ctx, p.ID)
		if err != nil || !reflect.DeepEqual(d, details[p.ID]) {
			t.Fatalf("archived packet %d: %+v, %v; was %+v", p.ID, d, err, details[p.ID])
		}
	}
	if p, err := f.s.Get(ctx, hot.ID); err != nil || p.Status != redpacket.StatusOpen {
		t.Fatalf("open packet after archive: %+v, %v", p, err)
	}
	_, ids := pageAll(t, 4, func(cursor string, n int) ([]redpacket.Packet, string, error) {
		return f.s.Sent(ctx, "alice", cursor, n)
	},
		func(p redpacket.Packet) int64 { return p.ID })
	if len(ids) != len(old)+1+during {
		t.Fatalf("alice's history has %d packets after the archive, want %d", len(ids), len(old)+1+during)
	}
	if b := f.balanced(); b.Debited != books.Debited+during*100 || b.Refunded != books.Refunded || b.Claimed != books.Claimed {
		t.Fatalf("books after archive %+v, before %+v", b, books)
	}
}
