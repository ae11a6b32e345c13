package order_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/casebook-dev/casebook/order"
)

// BenchmarkCreate: an order with one line — order row, outbox row, TCC
// reservation in the SKU's shard, reserved mark — against a raw one-row
// INSERT on the same databases, same run. Many SKUs, so rows are not hot.
func BenchmarkCreate(b *testing.B) {
	f := setupB(b)
	ctx := context.Background()
	f.manySKUs(64)
	db := f.dbs[0]
	if _, err := db.Exec(`CREATE TABLE raw_insert (id BIGINT NOT NULL PRIMARY KEY, user_id VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.ResetTimer()
	b.Run("raw-insert", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := seq.Add(1)
				if _, err := db.Exec(`INSERT INTO raw_insert (id, user_id, amount) VALUES (?, ?, ?)`, n, fmt.Sprint("u", n), n); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("order", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := seq.Add(1)
				_, err := f.s.Create(ctx, order.NewOrder{User: fmt.Sprint("u", n), RequestID: "r", Lines: []order.Line{{SKU: fmt.Sprint("sku", n%64), Qty: 1}}})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	})
}

// BenchmarkTransition: Pending → Paid through a first callback (payment row,
// order UPDATE with outbox row, callback record, stock confirm).
func BenchmarkTransition(b *testing.B) {
	f := setupB(b)
	ctx := context.Background()
	f.s.PutSKU(ctx, "s", 100, 1<<30)
	pays := make([]order.Payment, b.N)
	for i := range pays {
		o, err := f.s.Create(ctx, order.NewOrder{User: fmt.Sprint("u", i), RequestID: "r", Lines: []order.Line{{SKU: "s", Qty: 1}}})
		if err != nil {
			b.Fatal(err)
		}
		if pays[i], err = f.s.StartPayment(ctx, o.ID, "wechat"); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ResetTimer()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := pays[next.Add(1)-1]
			if out, err := f.s.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: fmt.Sprint("t", p.PayNo), Amount: p.Amount, Currency: p.Currency, Success: true}); err != nil || out != order.OutcomePaid {
				b.Errorf("%s %v", out, err)
				return
			}
		}
	})
}

// BenchmarkCallbackDuplicate: a replayed callback, which costs one indexed
// read and no write.
func BenchmarkCallbackDuplicate(b *testing.B) {
	f := setupB(b)
	ctx := context.Background()
	f.s.PutSKU(ctx, "s", 100, 10)
	o, _ := f.s.Create(ctx, order.NewOrder{User: "u", RequestID: "r", Lines: []order.Line{{SKU: "s", Qty: 1}}})
	p, _ := f.s.StartPayment(ctx, o.ID, "wechat")
	cb := order.Callback{PayNo: p.PayNo, GatewayTxn: "t", Amount: p.Amount, Currency: p.Currency, Success: true}
	if out, err := f.s.HandleCallback(ctx, cb); err != nil || out != order.OutcomePaid {
		b.Fatal(out, err)
	}
	b.ResetTimer()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if out, err := f.s.HandleCallback(ctx, cb); err != nil || out != order.OutcomePaid {
				b.Errorf("%s %v", out, err)
				return
			}
		}
	})
}

// BenchmarkCreateBatch: the same orders as BenchmarkCreate/order through
// CreateBatch, 200 at a time, 4 batches in flight.
func BenchmarkCreateBatch(b *testing.B) {
	f := setupB(b)
	ctx := context.Background()
	f.manySKUs(64)
	const size = 200
	var seq atomic.Int64
	b.ResetTimer()
	b.ReportAllocs()
	b.SetParallelism(2)
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]order.NewOrder, 0, size)
		flush := func() {
			for _, r := range f.s.CreateBatch(ctx, reqs) {
				if r.Err != nil {
					b.Error(r.Err)
				}
			}
			reqs = reqs[:0]
		}
		for pb.Next() {
			n := seq.Add(1)
			reqs = append(reqs, order.NewOrder{User: fmt.Sprint("u", n), RequestID: "r", Lines: []order.Line{{SKU: fmt.Sprint("sku", n%64), Qty: 1}}})
			if len(reqs) == size {
				flush()
			}
		}
		if len(reqs) > 0 {
			flush()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
}

// manySKUs puts n SKUs ("sku0"…) with ample stock, so no row is hot.
func (f *fixture) manySKUs(n int) {
	for i := range n {
		f.sku(fmt.Sprint("sku", i), 100, 1<<30)
	}
}
