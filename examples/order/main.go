// Command order runs the order block end to end on 8 databases × 8 tables:
// orders created in batches at the server's prices, paid through signed
// HTTP callbacks (some delivered twice, some after the order closed),
// unpaid ones closed by the delay queue, "paid" events relayed through
// Kafka to a fulfilment consumer that ships them, and a balance sheet.
//
//	go run ./examples/order
//
// Embedded defaults: 8 SQLite files (or 8 databases on CASEBOOK_MYSQL_DSN,
// named <db>_0 … <db>_7 when the DSN names one), a spawned Redis Cluster
// (or CASEBOOK_REDIS_CLUSTER / CASEBOOK_REDIS_ADDR), kfake (or
// CASEBOOK_KAFKA_BROKERS).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
)

func main() {
	orders := flag.Int("orders", 2000, "orders to create")
	timeout := flag.Duration("pay-timeout", 2*time.Second, "how long an order waits for payment")
	flag.Parse()
	devstack.Run(func(ctx context.Context) error { return run(ctx, *orders, *timeout) })
}

func run(ctx context.Context, n int, payTimeout time.Duration) error {
	st, err := devstack.OpenSharded(ctx, devstack.FromEnv(), "casebook_order", 8, os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r, k, sqls, dbs := st.Redis, st.Kafka, st.SQLs, st.DBs()
	fmt.Printf("8 databases × 8 tables on %s: %s … %s\n", sqls[0].Kind, sqls[0].Name, sqls[7].Name)

	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
	svc, err := order.New(r.Client, dbs, order.Config{Namespace: ns, PayTimeout: payTimeout})
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	for _, sku := range []string{"phone", "case", "charger"} {
		if err := svc.PutSKU(ctx, sku, 29900, int64(n)); err != nil {
			return err
		}
	}

	// Create in batches: one transaction per database per step.
	start := time.Now()
	var reqs []order.NewOrder
	for i := range n {
		lines := []order.Line{{SKU: "phone", Qty: 1}}
		if i%3 == 0 {
			lines = append(lines, order.Line{SKU: "case", Qty: 2})
		}
		reqs = append(reqs, order.NewOrder{User: "user-" + strconv.Itoa(i), RequestID: "checkout-1", Lines: lines})
	}
	var created []order.Order
	for i := 0; i < len(reqs); i += 250 {
		for _, res := range svc.CreateBatch(ctx, reqs[i:min(i+250, len(reqs))]) {
			if res.Err != nil {
				return res.Err
			}
			created = append(created, res.Order)
		}
	}
	fmt.Printf("created %d orders in %v (%.0f orders/s, batched)\n", len(created), time.Since(start).Round(time.Millisecond), float64(len(created))/time.Since(start).Seconds())

	// The gateway calls back over HTTP, signed; 70% of buyers pay, one in ten
	// callbacks is delivered twice.
	verifier := order.HMACVerifier{Key: []byte("example-key")}
	url, stop, err := serve(svc.CallbackHandler(verifier))
	if err != nil {
		return err
	}
	defer stop()
	var late []order.Payment
	paidCalls, dupCalls := 0, 0
	for i, o := range created {
		if i%10 >= 7 {
			continue
		}
		p, err := svc.StartPayment(ctx, o.ID, "wechat")
		if err != nil {
			return err
		}
		if i%100 == 6 { // this buyer pays after the deadline
			late = append(late, p)
			continue
		}
		for range 1 + btoi(i%10 == 0) {
			if err := callback(ctx, url, verifier, p, "wx-"+strconv.Itoa(i)); err != nil {
				return err
			}
			paidCalls++
		}
		dupCalls += btoi(i%10 == 0)
	}
	time.Sleep(payTimeout + 100*time.Millisecond)
	closed, err := svc.RunDue(ctx, 10_000)
	if err != nil {
		return err
	}
	for i, p := range late {
		if err := callback(ctx, url, verifier, p, "wx-late-"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	fmt.Printf("%d callbacks (%d duplicates) over HTTP; %d unpaid orders closed by the delay queue; %d payments arrived after their close\n",
		paidCalls, dupCalls, closed, len(late))

	// Outbox → Kafka → fulfilment, which ships each paid order once.
	topic := "orders-" + ns
	if err := kafka.CreateTopic(k.Brokers, topic, 8); err != nil {
		return err
	}
	pub, err := kafka.Dial(k.Brokers, "order-relay")
	if err != nil {
		return err
	}
	defer pub.Close()
	relayed := 0
	for {
		m, err := svc.RelayOutbox(ctx, pub, topic, 500)
		if err != nil {
			return err
		}
		if relayed += m; m == 0 {
			break
		}
	}
	var shipped atomic.Int64
	fulfil := func(ctx context.Context, _, value []byte) error {
		e, err := order.DecodeEvent(value)
		if err != nil || e.Kind != order.EventStatus || e.To != order.Paid {
			return err
		}
		if _, err := svc.Ship(ctx, e.OrderID); err != nil && !errors.Is(err, order.ErrIllegalTransition) {
			return err
		}
		shipped.Add(1)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := kafka.ConsumeN(cctx, k.Brokers, "fulfilment-"+ns, []string{topic}, int64(relayed), fulfil, kafka.ConsumerConfig{}); err != nil {
		return err
	}
	fmt.Printf("relayed %d events through Kafka (%s); fulfilment shipped %d orders\n", relayed, k.Kind, shipped.Load())
	return balance(ctx, svc, created)
}

// balance prints the books and fails when a line is off.
func balance(ctx context.Context, svc *order.Service, created []order.Order) error {
	count := map[order.Status]int{}
	var paidAmount, refundDue int64
	for _, o := range created {
		o, err := svc.Get(ctx, o.ID)
		if err != nil {
			return err
		}
		count[o.Status]++
		if o.PayNo != 0 {
			paidAmount += o.Amount
		}
		rs, err := svc.Refunds(ctx, o.ID)
		if err != nil {
			return err
		}
		for _, r := range rs {
			refundDue += r.Amount
		}
	}
	fmt.Printf("orders: %d shipped, %d closed, %d pending; paid ¥%.2f, refunds due ¥%.2f\n",
		count[order.Shipped], count[order.Closed], count[order.Pending], float64(paidAmount)/100, float64(refundDue)/100)
	n := int64(len(created))
	for _, sku := range []string{"phone", "case", "charger"} {
		st, err := svc.StockOf(ctx, sku)
		if err != nil {
			return err
		}
		fmt.Printf("  %-8s available %5d  locked %3d  sold %5d\n", sku, st.Available, st.Locked, st.Sold)
		if st.Available+st.Locked+st.Sold != n || st.Locked != 0 {
			return fmt.Errorf("stock of %s does not balance: %+v", sku, st)
		}
	}
	if count[order.Shipped]+count[order.Closed] != len(created) {
		return fmt.Errorf("orders left unsettled: %v", count)
	}
	return nil
}

func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := devstack.Server("", h)
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/pay/notify", func() { srv.Close() }, nil
}

// callback posts the gateway's signed report of a successful payment.
func callback(ctx context.Context, url string, v order.HMACVerifier, p order.Payment, txn string) error {
	body := fmt.Appendf(nil, `{"pay_no":%d,"gateway_txn":%q,"amount":%d,"currency":%q,"success":true}`, p.PayNo, txn, p.Amount, p.Currency)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts, sig := v.Sign(body, time.Now())
	req.Header.Set(order.HeaderTimestamp, ts)
	req.Header.Set(order.HeaderSignature, sig)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("callback %s: %s", txn, res.Status)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
