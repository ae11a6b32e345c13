package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backends are this test's: r, 8 databases (MariaDB when
// CASEBOOK_MYSQL_DSN is set, else SQLite files), Kafka (kfake unless
// CASEBOOK_KAFKA_BROKERS).
func backends(t *testing.T, r *testenv.Redis) Backends {
	return Backends{Redis: r.Client, DBs: testenv.NewSQLs(t, 8), Brokers: testenv.Kafka(t), About: string(r.Kind) + " Redis"}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func small(t *testing.T) Options {
	return Options{Buyers: 1500, Units: 100, Unpaid: 0.3, Late: 0.05, PayTimeout: 4 * time.Second, WriteRate: 2000,
		Drop: 0.1, Dup: 0.05, Concurrency: 64, Out: logWriter{t}, Now: testenv.Now}
}

// The load run's invariants on the real backends, smaller: every line of
// the balance sheet holds — units sold + restocked = units in Redis and in
// SQL, one payment kept per paid order, money received = paid + refunds due,
// no reconciliation difference after the active query, none paid twice or
// shipped unpaid — and the channel did drop and duplicate callbacks.
func TestLoadBalances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := small(t)
	env, err := Start(ctx, backends(t, testenv.NewRedisCluster(t)), o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	sheet, err := Load(ctx, env, o)
	if err != nil {
		t.Fatal(err)
	}
	if !sheet.OK() {
		t.Fatalf("the books do not balance: %+v", sheet.Lines)
	}
	st := env.Channel.Stats()
	// How many buyers reach the channel before their deadline depends on
	// the machine's load (57 of 100 winners on a loaded one), and with a few
	// dozen callbacks one kind of fault can miss by chance; none at all
	// means the faults are not injected.
	if st.Collections == 0 || st.Dropped+st.Duplicated == 0 {
		t.Fatalf("the channel's faults did not happen: %+v", st)
	}
	if env.Workers.recover.Load() == 0 {
		t.Fatalf("no payment was recovered by the active query: %v", env.Workers)
	}
}

// A Redis master of the cluster fails over mid-sale to a replica that missed
// its last writes: purchases decided in that window are forgotten (their
// buyers hold reservations that never become orders) and those units are
// sold again, yet the books balance — no unit is sold twice in SQL, Redis is
// repaired from SQL, every paid order kept one payment and every refund is
// due.
func TestFailoverMidSale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, cc := testenv.NewPrivateCluster(t)
	o := small(t)
	o.Buyers, o.Units, o.Concurrency = 3000, 300, 4
	o.PayTimeout = 15 * time.Second // orders lag while the shard fails over
	env, err := Start(ctx, backends(t, r), o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	o.MidSale = func() {
		sh := testenv.ShardOf(t, cc, env.Sale.Outboxes()[0])
		sh.Cut(t)
		time.Sleep(200 * time.Millisecond) // decisions that reach only the master
		sh.Failover(t)
	}
	sheet, err := Load(ctx, env, o)
	if err != nil {
		t.Fatal(err)
	}
	// Winners whose purchase the failover forgot cannot pay: those lines
	// differ by them; every line about units and money must hold.
	doubt := map[string]bool{"reservations that became an order": true,
		"payments that failed at the shop or channel": true, "buy requests failed (5xx, network)": true}
	var wins, orders int64
	for _, l := range sheet.Lines {
		switch {
		case l.What == "reservations that became an order":
			wins, orders = l.Want, l.Got
		case !doubt[l.What] && l.Got != l.Want:
			t.Errorf("%s: %d, want %d", l.What, l.Got, l.Want)
		}
	}
	if wins <= int64(o.Units) {
		t.Fatalf("%d winners for %d units: the failover forgot no decision, so this test proved nothing", wins, o.Units)
	}
	// Units the failover forgot were sold again in Redis; SQL refused the
	// extra orders (closed out of stock), and the lines above show no unit
	// sold twice.
	t.Logf("%d winners for %d units, %d orders (%d forgotten before relay); %v", wins, o.Units, orders, wins-orders, env.Workers)
}

// The notification endpoint takes only what the channel signed: a bad
// signature, a body tampered after signing, a replay outside the timestamp
// window are 401 and an unknown payment 422, each writing nothing; the same
// callback delivered twice pays once.
func TestCallbacksRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	o := small(t)
	o.ChannelKey, o.Units = key, 10
	env, err := Start(ctx, backends(t, testenv.NewRedis(t)), o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	ann := env.Shop.Token("ann", time.Hour)
	var ans BuyAnswer
	if status, err := call(ctx, hc, ann, http.MethodPost, env.URL+"/seckill/"+env.Campaign+"/buy", []byte(`{"price":1}`), &ans); err != nil || status != http.StatusAccepted {
		t.Fatalf("buy: %d, %v", status, err)
	}
	var view OrderView
	testenv.WaitFor(t, "the order", func() bool {
		status, err := call(ctx, hc, ann, http.MethodGet, env.URL+reservationURL(env.Campaign, ans.Reservation), nil, &view)
		return err == nil && status == http.StatusOK
	})
	if view.Amount != 399900 {
		t.Fatalf("the order charges %d, not the server's price (the client claimed 1)", view.Amount)
	}
	var p PayAnswer
	if status, err := call(ctx, hc, ann, http.MethodPost, env.URL+"/orders/"+view.ID+"/pay", nil, &p); err != nil || status != http.StatusCreated {
		t.Fatalf("start payment: %d, %v", status, err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	body := func(payNo, amount int64) []byte {
		return fmt.Appendf(nil, `{"pay_no":%d,"gateway_txn":"T-test-%d","amount":%d,"currency":"CNY","success":true,"paid_at":%q}`,
			payNo, payNo, amount, testenv.Now().UTC().Format(time.RFC3339))
	}
	notify := func(signer *rsa.PrivateKey, signed, sent []byte, at time.Time) int {
		t.Helper()
		ts, sig, err := order.SignRSA(signer, signed, at)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.URL+"/pay/notify", bytes.NewReader(sent))
		req.Header.Set(order.HeaderTimestamp, ts)
		req.Header.Set(order.HeaderSignature, sig)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	good := body(p.PayNo, p.Amount)
	for _, c := range []struct {
		name         string
		signer       *rsa.PrivateKey
		signed, sent []byte
		at           time.Time
		want         int
	}{
		{"another key", other, good, good, testenv.Now(), http.StatusUnauthorized},
		{"amount tampered after signing", key, good, body(p.PayNo, 1), testenv.Now(), http.StatusUnauthorized},
		{"replayed an hour later", key, good, good, testenv.Now().Add(-time.Hour), http.StatusUnauthorized},
		{"unknown payment", key, body(p.PayNo+1, p.Amount), body(p.PayNo+1, p.Amount), testenv.Now(), http.StatusUnprocessableEntity},
	} {
		if got := notify(c.signer, c.signed, c.sent, c.at); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	id := mustID(t, view.ID)
	got, err := env.Shop.orders.Get(ctx, id)
	if err != nil || got.Status != order.Pending || got.PayNo != 0 {
		t.Fatalf("after the refused callbacks the order is %+v, %v; want pending, unpaid", got, err)
	}
	if rs, err := env.Shop.orders.Refunds(ctx, id); err != nil || len(rs) != 0 {
		t.Fatalf("refunds after the refused callbacks: %+v, %v", rs, err)
	}
	for range 2 { // the real one, delivered twice
		if got := notify(key, good, good, testenv.Now()); got != http.StatusOK {
			t.Fatalf("the channel's callback: %d", got)
		}
	}
	got, err = env.Shop.orders.Get(ctx, id)
	if err != nil || got.Status == order.Pending || got.PayNo != p.PayNo {
		t.Fatalf("after the good callback the order is %+v, %v; want paid by %d", got, err, p.PayNo)
	}
	if rs, _ := env.Shop.orders.Refunds(ctx, id); len(rs) != 0 {
		t.Fatalf("a duplicate callback made refunds: %+v", rs)
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	var id int64
	if _, err := fmt.Sscan(s, &id); err != nil {
		t.Fatal(err)
	}
	return id
}

// The API as a client sees it: product detail at the server's price (and
// 404 for a product that does not exist, cached as such), a malformed buy
// refused with nothing bought, a repeated request answered with the same
// reservation, and the buyer's orders listed.
func TestAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := small(t)
	o.Units = 10
	env, err := Start(ctx, backends(t, testenv.NewRedis(t)), o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	ann, bob := env.Shop.Token("ann", time.Hour), env.Shop.Token("bob", time.Hour)
	var p Product
	if status, err := call(ctx, hc, "", http.MethodGet, env.URL+"/products/"+env.SKU, nil, &p); err != nil || status != http.StatusOK || p.Price != 399900 {
		t.Fatalf("product: %d, %+v, %v", status, p, err)
	}
	for range 2 { // the second answer comes from the negative cache
		if status, _ := call(ctx, hc, "", http.MethodGet, env.URL+"/products/nope", nil, nil); status != http.StatusNotFound {
			t.Fatalf("unknown product: %d", status)
		}
	}
	buy := env.URL + "/seckill/" + env.Campaign + "/buy"
	for _, bad := range []string{`{"qty":1,"coupon":"FREE"}`, `{"user":"ann"}`, `not json`, `{} {}`, `{"qty":2}`,
		`{"qty":1,"qty":1}`, `{"Qty":1}`, `null`, "{\"request_id\":\"\xff\"}"} {
		if status, _ := call(ctx, hc, ann, http.MethodPost, buy, []byte(bad), nil); status != http.StatusBadRequest {
			t.Errorf("buy %s: %d, want 400", bad, status)
		}
	}
	if status, _ := call(ctx, hc, ann, http.MethodPost, env.URL+"/seckill/nope/buy", []byte(`{}`), nil); status != http.StatusNotFound {
		t.Errorf("unknown campaign: %d", status)
	}
	if left, _ := env.Sale.RedisStock(ctx); left != 10 {
		t.Fatalf("refused buys took stock: %d left", left)
	}
	var first, again BuyAnswer
	body := []byte(`{"request_id":"checkout-1"}`)
	if status, err := call(ctx, hc, ann, http.MethodPost, buy, body, &first); err != nil || status != http.StatusAccepted {
		t.Fatalf("buy: %d, %v", status, err)
	}
	if status, err := call(ctx, hc, ann, http.MethodPost, buy, body, &again); err != nil || status != http.StatusAccepted || again.Reservation != first.Reservation || !again.Repeat {
		t.Fatalf("repeated buy: %d, %+v, %v; want %s again", status, again, err, first.Reservation)
	}
	if left, _ := env.Sale.RedisStock(ctx); left != 9 {
		t.Fatalf("the repeat deducted again: %d left", left)
	}
	// The scrape: the gate decided one purchase (the repeat was answered
	// from the shop's idempotency record), and the three product reads
	// each asked the local cache once.
	scrape := scrapeMetrics(t, ctx, hc, env.URL)
	if got := scrape.value(t, "casebook_seckill_operations_total", `casebook_operation="buy_batched",casebook_outcome="ok"`); got != 1 {
		t.Errorf("buy_batched ok = %v in the scrape, want 1", got)
	}
	local := scrape.value(t, "shop_product_lookups_total", `casebook_cache_layer="local",casebook_cache_result="hit"`) +
		scrape.value(t, "shop_product_lookups_total", `casebook_cache_layer="local",casebook_cache_result="miss"`)
	if sqlMiss := scrape.value(t, "shop_product_lookups_total", `casebook_cache_layer="sql",casebook_cache_result="miss"`); local != 3 || sqlMiss != 1 {
		t.Errorf("product lookups: %v local, %v SQL misses; want 3 and 1 (the unknown SKU, then cached as missing)", local, sqlMiss)
	}
	var view OrderView
	testenv.WaitFor(t, "the order", func() bool {
		status, err := call(ctx, hc, ann, http.MethodGet, env.URL+reservationURL(env.Campaign, first.Reservation), nil, &view)
		return err == nil && status == http.StatusOK
	})
	var list struct {
		Orders []OrderView `json:"orders"`
	}
	if status, err := call(ctx, hc, ann, http.MethodGet, env.URL+"/users/ann/orders", nil, &list); err != nil || status != http.StatusOK ||
		len(list.Orders) != 1 || list.Orders[0].ID != view.ID || list.Orders[0].Reservation != first.Reservation {
		t.Fatalf("ann's orders: %d, %+v, %v", status, list, err)
	}
	if status, err := call(ctx, hc, ann, http.MethodGet, env.URL+"/orders/"+view.ID, nil, &view); err != nil || status != http.StatusOK || view.User != "ann" {
		t.Fatalf("ann reading her order: %d, %+v, %v", status, view, err)
	}

	// Another buyer's token reads and pays nothing of ann's: 404, as for an
	// order that does not exist, so ids are not confirmed.
	for what, r := range map[string][2]string{
		"bob reads ann's order":       {http.MethodGet, "/orders/" + view.ID},
		"bob pays ann's order":        {http.MethodPost, "/orders/" + view.ID + "/pay"},
		"bob lists ann's orders":      {http.MethodGet, "/users/ann/orders"},
		"bob reads ann's reservation": {http.MethodGet, reservationURL(env.Campaign, first.Reservation)},
	} {
		if status, _ := call(ctx, hc, bob, r[0], env.URL+r[1], nil, nil); status != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", what, status)
		}
	}
	// No session, or a forged, tampered or expired one: 401 on every
	// buyer's route, and nothing bought.
	parts := strings.Split(ann, ".")
	forged := map[string]string{
		"no token":               "",
		"garbage":                "not-a-token",
		"user swapped":           base64.RawURLEncoding.EncodeToString([]byte("bob")) + "." + parts[1] + "." + parts[2],
		"expiry moved":           parts[0] + "." + strconv.FormatInt(mustInt(t, parts[1])+3600, 10) + "." + parts[2],
		"MAC of another key":     sessions{key: []byte("another shop's key, 32 bytes...."), now: testenv.Now}.mint("ann", time.Hour),
		"expired":                env.Shop.Token("ann", -time.Second),
		"leading zero in expiry": parts[0] + ".0" + parts[1] + "." + parts[2],
		"MAC truncated":          parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-2],
	}
	for what, token := range forged {
		for _, r := range [][2]string{{http.MethodPost, "/seckill/" + env.Campaign + "/buy"}, {http.MethodGet, "/orders/" + view.ID},
			{http.MethodPost, "/orders/" + view.ID + "/pay"}, {http.MethodGet, "/users/ann/orders"}, {http.MethodGet, reservationURL(env.Campaign, first.Reservation)}} {
			if status, _ := call(ctx, hc, token, r[0], env.URL+r[1], []byte(`{}`), nil); status != http.StatusUnauthorized {
				t.Errorf("%s: %s %s: %d, want 401", what, r[0], r[1], status)
			}
		}
	}
	if left, _ := env.Sale.RedisStock(ctx); left != 9 {
		t.Fatalf("refused sessions took stock: %d left", left)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// metricsScrape is one GET /metrics, in the Prometheus text format.
type metricsScrape string

func scrapeMetrics(t *testing.T, ctx context.Context, hc *http.Client, url string) metricsScrape {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", res.StatusCode, err)
	}
	return metricsScrape(body)
}

// value returns the sample of metric whose labels include labels (in the
// exposition's order), 0 when there is none.
func (m metricsScrape) value(t *testing.T, metric, labels string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(m), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != metric || !strings.Contains(rest, labels) {
			continue
		}
		_, v, _ := strings.Cut(rest, "} ")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", line, err)
		}
		return f
	}
	return 0
}
