package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/order"
)

// Sheet is the balance sheet of a run: every line must hold.
type Sheet struct {
	Lines  []Line
	orders int64
}

// Line is one check: Got must equal Want.
type Line struct {
	What      string
	Want, Got int64
}

// OK reports whether every line holds.
func (s *Sheet) OK() bool {
	for _, l := range s.Lines {
		if l.Want != l.Got {
			return false
		}
	}
	return true
}

func (s *Sheet) add(what string, want, got int64) { s.Lines = append(s.Lines, Line{what, want, got}) }

func (s *Sheet) print(w io.Writer) {
	for _, l := range s.Lines {
		mark := "ok "
		if l.Want != l.Got {
			mark = "OFF"
		}
		fmt.Fprintf(w, "  %s %-58s %10d  (want %d)\n", mark, l.What, l.Got, l.Want)
	}
}

// buyer is a winner and what it does next.
type buyer struct {
	user, reservation string
	token             string // the buyer's session
	plan              int    // payNow, never, payLate
}

const (
	payNow = iota
	never
	payLate
)

// Load sends o.Buyers buyers at the sale over HTTP, has the winners pay (or
// not, or too late) at the payment channel, waits until every order is
// settled, runs the active query and the reconciliation, and returns the
// balance sheet (printed to o.Out).
func Load(ctx context.Context, env *Env, o Options) (*Sheet, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.Concurrency}}
	defer hc.CloseIdleConnections()
	from := env.now().Add(-time.Minute) // the shop's clock: its orders and statement use it
	var prod Product
	if status, err := call(ctx, hc, "", http.MethodGet, env.URL+"/products/"+env.SKU, nil, &prod); err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("product detail: %d, %v", status, err)
	}

	// The sale: every buyer once, some twice with the same request (a
	// client retry), all claiming a price of 1 fen.
	var mu sync.Mutex
	var wins []buyer
	var statuses [600]atomic.Int64
	var repeats, repeatMismatch atomic.Int64
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Concurrency {
		wg.Go(func() {
			for i := range jobs {
				user := "buyer-" + strconv.Itoa(i)
				body := []byte(`{"qty":1,"price":1}`)
				token := env.Shop.Token(user, 24*time.Hour) // from the shop's login service
				var ans BuyAnswer
				status, err := call(ctx, hc, token, http.MethodPost, env.URL+"/seckill/"+env.Campaign+"/buy", body, &ans)
				if err != nil {
					status = 599
				}
				statuses[status].Add(1)
				if status != http.StatusAccepted {
					continue
				}
				if i%20 == 0 { // the client retries: same key, same reservation, nothing deducted
					var again BuyAnswer
					if s, err := call(ctx, hc, token, http.MethodPost, env.URL+"/seckill/"+env.Campaign+"/buy", body, &again); err == nil && s == http.StatusAccepted {
						repeats.Add(1)
						if again.Reservation != ans.Reservation || !again.Repeat {
							repeatMismatch.Add(1)
						}
					}
				}
				mu.Lock()
				wins = append(wins, buyer{user: user, reservation: ans.Reservation, token: token})
				if len(wins) == o.Units/3 && o.MidSale != nil {
					wg.Go(o.MidSale) // a third of the units sold
				}
				mu.Unlock()
			}
		})
	}
	for i := range o.Buyers {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	saleTime := time.Since(start)
	fmt.Fprintf(o.Out, "sale: %d buyers in %v (%.0f buy requests/s through the gate): %d won, %d sold out, %d over the limit, %d rate-limited, %d failed\n",
		o.Buyers, saleTime.Round(time.Millisecond), float64(o.Buyers)/saleTime.Seconds(), statuses[202].Load(), statuses[410].Load(),
		statuses[409].Load(), statuses[429].Load(), statuses[599].Load()+statuses[500].Load()+statuses[503].Load())

	// The winners: most pay, some never, some too late.
	for i := range wins {
		switch f := float64(i) / float64(len(wins)); {
		case f < o.Unpaid:
			wins[i].plan = never
		case f < o.Unpaid+o.Late:
			wins[i].plan = payLate
		}
	}
	var paidAtChannel, lateAtChannel, tooLate, payErrors atomic.Int64
	var maxBacklog, allWritten atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	go func() {
		for tick := time.NewTicker(50 * time.Millisecond); sampling.Err() == nil; <-tick.C {
			if b := env.Workers.Backlog(); b > maxBacklog.Load() {
				maxBacklog.Store(b)
			}
			if allWritten.Load() == 0 && env.Workers.written.Load() >= int64(len(wins)) {
				allWritten.Store(int64(time.Since(start)))
			}
		}
	}()
	client := env.Channel.Client()
	for _, b := range wins {
		if b.plan == never {
			continue
		}
		wg.Go(func() {
			err := b.pay(ctx, hc, env, client.Pay, o.PayTimeout)
			if errors.Is(err, errTooLate) {
				tooLate.Add(1)
				return
			}
			if err != nil {
				payErrors.Add(1)
				fmt.Fprintf(o.Out, "  %s: %v\n", b.user, err)
				return
			}
			if b.plan == payLate {
				lateAtChannel.Add(1)
			} else {
				paidAtChannel.Add(1)
			}
		})
	}
	wg.Wait()
	stopSampling()
	fmt.Fprintf(o.Out, "payments: %d paid at the channel in time, %d after their deadline, %d found no order to pay by their deadline, %d never tried; %d failed; Kafka backlog peaked at %d orders (written at ≤ %d/s)\n",
		paidAtChannel.Load(), lateAtChannel.Load(), tooLate.Load(), len(wins)-int(paidAtChannel.Load()+lateAtChannel.Load()+tooLate.Load()+payErrors.Load()),
		payErrors.Load(), maxBacklog.Load(), o.WriteRate)
	if d := time.Duration(allWritten.Load()); d > 0 {
		fmt.Fprintf(o.Out, "orders: all %d written %v after the sale began (%.0f orders/s from Kafka into 8 × 8 tables)\n", len(wins), d.Round(time.Millisecond), float64(len(wins))/d.Seconds())
	}

	// Settle: every order paid or closed and shipped or restocked, the
	// channel done with its retries.
	if err := env.settle(ctx, len(wins), o.PayTimeout); err != nil {
		return nil, err
	}
	st := env.Channel.Stats()
	fmt.Fprintf(o.Out, "channel: %d collections, %d callbacks sent (%d dropped, %d duplicated, %d answered 5xx or not at all, %d refused 4xx); %s\n",
		st.Collections, st.Sent, st.Dropped, st.Duplicated, st.Failed, st.Refused, env.Workers)

	// The active query over everything still waiting, then T+1 reconciliation.
	orders := env.Shop.orders
	recovered, err := orders.RecoverPayments(ctx, client, 24*time.Hour, 1000)
	if err != nil {
		return nil, err
	}
	to := env.now().Add(time.Minute)
	lines, err := client.Statement(ctx, from, to)
	if err != nil {
		return nil, err
	}
	// The run is over and the channel has stopped retrying: no grace.
	rec, err := orders.Reconcile(ctx, lines, from, to, time.Nanosecond)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "reconciliation: %d statement lines, %d matched, %d differences (the final active query resolved %d)\n",
		rec.Lines, rec.Matched, len(rec.Diffs), recovered)
	for _, d := range rec.Diffs {
		fmt.Fprintf(o.Out, "  review: %+v\n", d)
	}
	sheet, err := env.balance(ctx, o, lines, prod.Price)
	if err != nil {
		return nil, err
	}
	sheet.add("reconciliation differences", 0, int64(len(rec.Diffs)))
	sheet.add("repeated buys answered with another reservation", 0, repeatMismatch.Load())
	// A unit can be won more than once: one whose order closed while the
	// sale ran (its buyer's compressed deadline, a cancel) is back on sale.
	// That no unit was sold twice is the unit lines above: every unit sold
	// or left exactly once, in Redis and in SQL.
	sheet.add("units won at least once (sold out)", int64(o.Units), min(int64(len(wins)), int64(o.Units)))
	sheet.add("reservations that became an order", int64(len(wins)), sheet.orders)
	sheet.add("buy requests failed (5xx, network)", 0, statuses[599].Load()+statuses[500].Load()+statuses[503].Load())
	sheet.add("payments that failed at the shop or channel", 0, payErrors.Load())
	fmt.Fprintln(o.Out, "balance sheet:")
	sheet.print(o.Out)
	return sheet, nil
}

// errTooLate: the buyer's order closed (or was not written yet) by its
// deadline: nothing to pay, the units go back.
var errTooLate = errors.New("the order closed before the buyer paid")

// pay takes the winner's reservation to its order, starts a payment and pays
// it at the channel (after the deadline for a late payer).
func (b buyer) pay(ctx context.Context, hc *http.Client, env *Env, payAt func(context.Context, int64, int64, string) (order.Callback, error), timeout time.Duration) error {
	var o OrderView
	for wait := time.Now().Add(timeout); ; {
		status, err := call(ctx, hc, b.token, http.MethodGet, env.URL+reservationURL(env.Campaign, b.reservation), nil, &o)
		if err != nil {
			return err
		}
		if status == http.StatusOK {
			break
		}
		if status != http.StatusAccepted {
			return fmt.Errorf("reservation %s: %d", b.reservation, status)
		}
		if time.Now().After(wait) {
			// The order came later than the deadline (the consumers
			// were behind): the buyer cannot pay, the units go back.
			return errTooLate
		}
		time.Sleep(50 * time.Millisecond)
	}
	var p PayAnswer
	status, err := call(ctx, hc, b.token, http.MethodPost, env.URL+"/orders/"+o.ID+"/pay", nil, &p)
	if err == nil && status == http.StatusConflict {
		return errTooLate // the order closed (its deadline, or out of stock) before the buyer came
	}
	if err != nil || status != http.StatusCreated {
		return fmt.Errorf("start payment of %s: %d, %v", o.ID, status, err)
	}
	if b.plan == payLate {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.PayDeadline.Sub(env.now()) + time.Second):
		}
	}
	_, err = payAt(ctx, p.PayNo, p.Amount, p.Currency)
	return err
}

// settle waits until the sale is settled: no order in Kafka, none pending,
// Redis agreeing with SQL, every paid order shipped, the channel's callbacks
// delivered or given up.
func (e *Env) settle(ctx context.Context, wins int, payTimeout time.Duration) error {
	deadline := time.Now().Add(3*payTimeout + time.Minute)
	var why string
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		all, err := e.campaignOrders(ctx)
		if err != nil {
			return err
		}
		pending, paid, shipped := 0, 0, 0
		for _, o := range all {
			switch o.Status {
			case order.Pending:
				pending++
			case order.Paid:
				paid++
			case order.Shipped, order.Completed:
				paid++
				shipped++
			}
		}
		rep, err := e.Sale.Reconcile(ctx, false)
		if err != nil {
			return err
		}
		ch := e.Channel.Stats()
		why = fmt.Sprintf("%d of %d orders created, %d pending, %d of %d paid shipped, backlog %d, gate %+v, %d callbacks in delivery",
			len(all), wins, pending, shipped, paid, e.Workers.Backlog(), rep, ch.Pending)
		if pending == 0 && shipped == paid && e.Workers.Backlog() == 0 && rep.OK() && rep.InFlight == 0 && ch.Pending == 0 {
			return nil
		}
	}
	return fmt.Errorf("the sale did not settle: %s", why)
}

// campaignOrders reads this run's orders (every order of the campaign's
// SKU), from every table.
func (e *Env) campaignOrders(ctx context.Context) ([]order.Order, error) {
	var out []order.Order
	for cursor := ""; ; {
		page, next, err := e.Shop.orders.Search(ctx, order.Filter{}, cursor, 500)
		if err != nil {
			return nil, err
		}
		for _, o := range page {
			if len(o.Items) == 1 && o.Items[0].SKU == e.SKU {
				out = append(out, o)
			}
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// balance draws the books from the records: the orders, the SKU's stock in
// SQL and in Redis, the channel's statement and the refunds.
func (e *Env) balance(ctx context.Context, o Options, lines []order.StatementLine, price int64) (*Sheet, error) {
	orders := e.Shop.orders
	all, err := e.campaignOrders(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[int64]order.Order{}
	var paidUnits, paidAmount, shippedUnpaid, pending, atPrice, shipped int64
	for _, x := range all {
		byID[x.ID] = x
		if x.Amount == price*x.Items[0].Qty {
			atPrice++
		}
		switch x.Status {
		case order.Pending:
			pending++
		case order.Paid, order.Shipped, order.Completed:
			paidUnits += x.Items[0].Qty
			paidAmount += x.Amount
			if x.Status != order.Paid {
				shipped++
				if x.PayNo == 0 {
					shippedUnpaid++
				}
			}
		}
	}
	// The channel's collections, by order.
	collected := map[int64]int64{}
	var money int64
	for _, l := range lines {
		p, err := orders.PaymentOf(ctx, l.PayNo)
		if err != nil {
			return nil, fmt.Errorf("statement line %s: %w", l.GatewayTxn, err)
		}
		if _, ours := byID[p.OrderID]; !ours {
			continue
		}
		collected[p.OrderID]++
		money += l.Amount
	}
	var refunds, unexplained, paidOnce, paidTwice int64
	for id, n := range collected {
		rs, err := orders.Refunds(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			refunds += r.Amount
		}
		kept := n - int64(len(rs)) // collections not refunded: must be the one that paid
		x := byID[id]
		isPaid := x.Status == order.Paid || x.Status == order.Shipped || x.Status == order.Completed
		switch {
		case isPaid && kept == 1:
			paidOnce++
		case isPaid && kept > 1:
			paidTwice++
		case !isPaid && kept != 0:
			unexplained++
		}
	}
	st, err := orders.StockOf(ctx, e.SKU)
	if err != nil {
		return nil, err
	}
	redisLeft, err := e.Sale.RedisStock(ctx)
	if err != nil {
		return nil, err
	}
	var paidOrders int64
	for _, x := range all {
		if x.Status == order.Paid || x.Status == order.Shipped || x.Status == order.Completed {
			paidOrders++
		}
	}
	units := int64(o.Units)
	s := &Sheet{orders: int64(len(all))}
	s.add("units sold + left in Redis", units, paidUnits+redisLeft)
	s.add("units sold + available + locked in SQL", units, st.Sold+st.Available+st.Locked)
	s.add("units sold in SQL = units of paid orders", paidUnits, st.Sold)
	s.add("units locked in SQL after the sale", 0, st.Locked)
	s.add("orders pending after the sale", 0, pending)
	s.add("orders charged the server's price", int64(len(all)), atPrice)
	s.add("paid orders with exactly one payment kept", paidOrders, paidOnce)
	s.add("orders paid twice", 0, paidTwice)
	s.add("money kept by unpaid orders (not refunded)", 0, unexplained)
	s.add("money received = paid orders + refunds due", money, paidAmount+refunds)
	s.add("paid orders shipped", paidOrders, shipped)
	s.add("orders shipped unpaid", 0, shippedUnpaid)
	fmt.Fprintf(o.Out, "books: %d orders, %d paid (¥%.2f), %d closed; SQL stock: %d available, %d locked, %d sold; Redis %d left; received ¥%.2f, refunds due ¥%.2f\n",
		len(all), paidOrders, float64(paidAmount)/100, int64(len(all))-paidOrders-pending, st.Available, st.Locked, st.Sold, redisLeft, float64(money)/100, float64(refunds)/100)
	return s, nil
}

// call sends a JSON request and decodes a JSON answer into v (any status).
// call sends one request (as the buyer token names, or anonymously for "")
// and decodes a 2xx answer into v.
func call(ctx context.Context, hc *http.Client, token, method, url string, body []byte, v any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, err
	}
	if v != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, v); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: %w", method, url, err)
		}
	}
	return res.StatusCode, nil
}
