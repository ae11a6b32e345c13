package order_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
)

// memPub records what was published; with failAfter set it publishes and
// then reports failure, as a relay killed between the broker's ack and the
// "sent" mark sees it.
type memPub struct {
	mu        sync.Mutex
	msgs      []outbox.Message
	failAfter int
}

func (p *memPub) Publish(_ context.Context, ms []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, ms...)
	if p.failAfter > 0 {
		p.failAfter--
		return errors.New("relay killed after the ack")
	}
	return nil
}

// events decodes what was published, by event id with counts.
func (p *memPub) events(t *testing.T) map[string]int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, m := range p.msgs {
		e, err := order.DecodeEvent(m.Value)
		if err != nil {
			t.Fatalf("published %q: %v", m.Value, err)
		}
		if string(m.Key) != fmt.Sprint(e.OrderID) {
			t.Fatalf("event %s keyed %q, not by its order", e.ID, m.Key)
		}
		out[e.ID]++
	}
	return out
}

func (f *fixture) relayAll(pub outbox.Publisher) {
	f.t.Helper()
	for range 100 {
		n, err := f.s.RelayOutbox(context.Background(), pub, "orders", 50)
		if err != nil {
			continue // a failing publisher: rows stay for the next pass
		}
		if n == 0 {
			return
		}
	}
	f.t.Fatal("outbox never drained")
}

// The trap of relays that follow an auto-increment watermark: a transaction
// that took a lower id commits after a higher one was relayed. The relay
// finds rows by their unsent mark, so the late row still goes out.
func TestRelayDoesNotSkipLateCommits(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	if !sqlutil.IsMySQL(f.dbs[0]) {
		t.Skip("SQLite has one writer: a transaction cannot commit behind another's back")
	}
	f.sku("s", 10, 10)
	var late []*sqlx.Tx
	for i, db := range f.dbs { // an in-flight transaction in every database
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		payload := fmt.Sprintf(`{"v":1,"id":"late-%d","kind":"status","order":%d,"user":"x","amount":0,"at":0}`, i, 1000+i)
		if _, err := tx.Exec(`INSERT INTO order_outbox (event_id, order_id, payload, created_at, sent_at) VALUES (?, ?, ?, 0, 0)`, fmt.Sprint("late-", i), 1000+i, payload); err != nil {
			t.Fatal(err)
		}
		late = append(late, tx)
	}
	o := f.create("u", "r", order.Line{SKU: "s", Qty: 1}) // commits after the late rows took their ids
	pub := &memPub{}
	f.relayAll(pub)
	if got := pub.events(t); got[fmt.Sprintf("o%d-v1", o.ID)] != 1 || len(got) != 1 {
		t.Fatalf("first pass published %v", got)
	}
	for _, tx := range late {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	f.relayAll(pub)
	got := pub.events(t)
	for i := range f.dbs {
		if got[fmt.Sprint("late-", i)] != 1 {
			t.Fatalf("late commit %d was skipped: %v", i, got)
		}
	}
}

// Four relays at once publish every event exactly once (SKIP LOCKED hands
// them disjoint rows); a relay killed between the ack and the mark only
// causes duplicates, which consumers drop by event id.
func TestRelaysConcurrentAndKilled(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 10, 1000)
	for i := range 200 {
		f.create(fmt.Sprint("u", i), "r", order.Line{SKU: "s", Qty: 1})
	}
	pub := &memPub{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { f.relayAll(pub) })
	}
	wg.Wait()
	got := pub.events(t)
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	if len(got) != 200 || (dups != 0 && sqlutil.IsMySQL(f.dbs[0])) {
		t.Fatalf("%d distinct events, %d duplicates; want 200 and none", len(got), dups)
	}
	for i := range 30 {
		f.create(fmt.Sprint("v", i), "r", order.Line{SKU: "s", Qty: 1})
	}
	killed := &memPub{failAfter: 2}
	f.relayAll(killed)
	again := killed.events(t)
	if len(again) != 30 || len(killed.msgs) <= 30 {
		t.Fatalf("after a killed relay: %d distinct of %d messages; want all 30, some twice", len(again), len(killed.msgs))
	}
	if n, _ := f.s.PendingEvents(ctx); n != 0 {
		t.Fatalf("%d events still pending", n)
	}
	// A consumer that applies each event once, by id.
	applied := map[string]bool{}
	for _, m := range killed.msgs {
		e, _ := order.DecodeEvent(m.Value)
		applied[e.ID] = true
	}
	if len(applied) != 30 {
		t.Fatalf("consumer applied %d events", len(applied))
	}
	if _, err := order.DecodeEvent([]byte(`{"v":2}`)); !errors.Is(err, outbox.ErrPoison) {
		t.Fatalf("bad event not poison: %v", err)
	}
}

// Reconciliation against a generated statement with injected differences
// finds exactly them, repairs the missed callback, and a second run writes
// nothing and changes nothing.
func TestReconcileFindsInjectedDifferences(t *testing.T) {
	ctx := context.Background()
	logs := obstest.NewLogs()
	f := setup(t, order.Config{Logger: logs.Logger})
	f.sku("s", 700, 100)
	var lines []order.StatementLine
	paidAt := f.clk.Now()
	var missedOrder int64
	var notAtGateway, mismatched int64
	for i := range 12 {
		o := f.create(fmt.Sprint("u", i), "r", order.Line{SKU: "s", Qty: 1})
		p, err := f.s.StartPayment(ctx, o.ID, "wechat")
		if err != nil {
			t.Fatal(err)
		}
		txn := fmt.Sprint("wx-", i)
		line := order.StatementLine{GatewayTxn: txn, PayNo: p.PayNo, Amount: p.Amount, Time: paidAt}
		switch i {
		case 0: // collected, callback lost
			missedOrder = o.ID
			lines = append(lines, line)
			continue
		case 1: // paid here, missing from the statement
			notAtGateway = p.PayNo
		case 2: // the statement's amount differs
			mismatched = p.PayNo
			lines = append(lines, order.StatementLine{GatewayTxn: txn, PayNo: p.PayNo, Amount: p.Amount + 1, Time: paidAt})
		case 3: // listed twice
			lines = append(lines, line, line)
		default:
			lines = append(lines, line)
		}
		if _, err := f.s.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: txn, Amount: p.Amount, Currency: "CNY", Success: true, PaidAt: paidAt}); err != nil {
			t.Fatal(err)
		}
	}
	lines = append(lines, order.StatementLine{GatewayTxn: "wx-stranger", PayNo: 42 << 16, Amount: 5, Time: paidAt})
	csv := order.StatementHeader + "\n"
	for _, l := range lines {
		csv += fmt.Sprintf("%s,%d,%d,SUCCESS,%s\n", l.GatewayTxn, l.PayNo, l.Amount, l.Time.Format(time.RFC3339))
	}
	csv += "wx-refund,1,5,REFUND," + paidAt.Format(time.RFC3339) + "\n"
	parsed, err := order.ParseStatement(strings.NewReader(csv))
	if err != nil || len(parsed) != len(lines) {
		t.Fatalf("parsed %d of %d lines: %v", len(parsed), len(lines), err)
	}
	f.clk.Add(25 * time.Hour)
	from, to := paidAt.Add(-time.Hour), paidAt.Add(time.Hour)
	// Bad windows are refused before anything is read or written (the first
	// real run below finds every difference new).
	for _, bad := range []struct {
		from, to time.Time
		grace    time.Duration
	}{{from, to, -time.Second}, {to, from, 0}, {from, from, 0}} {
		if _, err := f.s.Reconcile(ctx, parsed, bad.from, bad.to, bad.grace); !errors.Is(err, order.ErrInvalid) {
			t.Fatalf("Reconcile [%v, %v) grace %v: %v, want ErrInvalid", bad.from, bad.to, bad.grace, err)
		}
	}
	rep, err := f.s.Reconcile(ctx, parsed, from, to, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range rep.Diffs {
		if !d.New {
			t.Errorf("first run: %+v not new", d)
		}
		kinds = append(kinds, d.Kind)
	}
	sort.Strings(kinds)
	want := []string{order.DiffAmount, order.DiffDuplicateLine, order.DiffMissedCallback, order.DiffNotAtGateway, order.DiffUnknownPayment}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("diffs %v, want %v (%+v)", kinds, want, rep)
	}
	for _, d := range rep.Diffs {
		if d.Kind == order.DiffNotAtGateway && d.PayNo != notAtGateway || d.Kind == order.DiffAmount && d.PayNo != mismatched {
			t.Errorf("%s names payment %d", d.Kind, d.PayNo)
		}
	}
	if got := f.get(missedOrder); got.Status != order.Paid {
		t.Fatalf("the missed callback was not applied: %s", got.Status)
	}
	before := f.get(missedOrder)
	// Each difference logged once, as found; the second run logs nothing.
	var logged []string
	for _, d := range rep.Diffs {
		logged = append(logged, fmt.Sprintf("WARN order: reconcile found a difference; recorded for review casebook.block=order kind=%s gateway_txn=%s pay_no=%d detail=%s",
			d.Kind, d.GatewayTxn, d.PayNo, d.Detail))
	}
	records := logs.Lines()
	sort.Strings(records) // as found; the report is sorted its own way
	sort.Strings(logged)
	if fmt.Sprint(records) != fmt.Sprint(logged) {
		t.Fatalf("logged\n%q\nwant\n%q", records, logged)
	}
	rep2, err := f.s.Reconcile(ctx, parsed, from, to, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(logs.Lines()); n != len(logged) {
		t.Fatalf("the second run logged %q", logs.Lines()[len(logged):])
	}
	for _, d := range rep2.Diffs {
		if d.New {
			t.Errorf("second run wrote %+v", d)
		}
	}
	if after := f.get(missedOrder); after.Version != before.Version {
		t.Fatal("second run changed an order")
	}
	for _, line := range []string{"x,notanumber,1,SUCCESS,", "x,7,0,SUCCESS,", "x,7,-5,SUCCESS,", "x,0,5,SUCCESS,"} {
		at := testenv.Now().UTC().Format(time.RFC3339)
		if _, err := order.ParseStatement(strings.NewReader(order.StatementHeader + "\n" + line + at + "\n")); !errors.Is(err, order.ErrInvalid) {
			t.Errorf("malformed statement line %q: %v, want ErrInvalid", line+at, err)
		}
	}
}

// toKafkaThenFail publishes to Kafka, then reports failure failAfter times:
// a relay killed between the broker's ack and marking its rows sent.
type toKafkaThenFail struct {
	mu        sync.Mutex
	p         outbox.Publisher
	topic     string
	failAfter int
	sent      int
}

func (k *toKafkaThenFail) Publish(ctx context.Context, ms []outbox.Message) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range ms {
		ms[i].Topic = k.topic
	}
	if err := k.p.Publish(ctx, ms); err != nil {
		return err
	}
	k.sent += len(ms)
	if k.failAfter > 0 {
		k.failAfter--
		return errors.New("relay killed after the ack")
	}
	return nil
}

// The same kill through a real broker: Kafka holds duplicates of the
// batches whose marks were lost, and a consumer reading the topic finds
// every event, each id applied once.
func TestRelayKilledThroughKafka(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 10, 100)
	for i := range 30 {
		f.create(fmt.Sprint("u", i), "r", order.Line{SKU: "s", Qty: 1})
	}
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 3)
	p, err := kafka.Dial(brokers, "order-relay")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pub := &toKafkaThenFail{p: p, topic: topic, failAfter: 2}
	f.relayAll(pub)
	var mu sync.Mutex
	applied := map[string]int{}
	c, err := kafka.ConsumeN(ctx, brokers, "fulfil-"+topic, []string{topic}, int64(pub.sent), func(_ context.Context, _, v []byte) error {
		e, err := order.DecodeEvent(v)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		applied[e.ID]++
		return nil
	}, kafka.ConsumerConfig{})
	if err != nil || c.Handled() != int64(pub.sent) {
		t.Fatalf("consumed %d of %d: %v", c.Handled(), pub.sent, err)
	}
	if len(applied) != 30 || pub.sent <= 30 {
		t.Fatalf("%d distinct events in %d messages; want all 30, some twice", len(applied), pub.sent)
	}
	if n, _ := f.s.PendingEvents(ctx); n != 0 {
		t.Fatalf("%d events still pending", n)
	}
}
