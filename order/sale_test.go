package order_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/order"
)

// What a flash-sale gate builds on: a SKU created once with fixed stock, an
// order whose deadline the gate set, found again by its request id, read in
// bulk, and the SKU's holds adding up to its stock in one snapshot.
func TestSaleSupport(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	if created, err := f.s.CreateSKU(ctx, "flash", 100, 5); err != nil || !created {
		t.Fatalf("CreateSKU: %v, %v", created, err)
	}
	if created, err := f.s.CreateSKU(ctx, "flash", 100, 5); err != nil || created {
		t.Fatalf("repeating CreateSKU with the same stock: created %v, %v; want false, nil", created, err)
	}
	for _, again := range [][2]int64{{100, 6}, {99, 5}} {
		if _, err := f.s.CreateSKU(ctx, "flash", again[0], again[1]); !errors.Is(err, order.ErrInvalid) {
			t.Fatalf("CreateSKU(flash, %d, %d) over the existing one: %v, want ErrInvalid", again[0], again[1], err)
		}
	}
	if st := f.stock("flash"); st.Available != 5 || st.Price != 100 {
		t.Fatalf("stock after refused re-creates: %+v", st)
	}

	payBy := start.Add(7 * time.Minute)
	var ids []int64
	for i := range 4 {
		o, err := f.s.Create(ctx, order.NewOrder{User: fmt.Sprint("u", i), RequestID: fmt.Sprint("res-", i), Lines: []order.Line{{SKU: "flash", Qty: 1}}, PayBy: payBy})
		if err != nil {
			t.Fatal(err)
		}
		if !o.PayDeadline.Equal(payBy) {
			t.Fatalf("pay deadline %v, want the caller's %v", o.PayDeadline, payBy)
		}
		ids = append(ids, o.ID)
	}
	if _, err := f.s.Create(ctx, order.NewOrder{User: "x", RequestID: "r", Lines: []order.Line{{SKU: "flash", Qty: 1}}, PayBy: time.Unix(-1<<40, 0)}); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("a pay-by in year %d: %v, want ErrInvalid", time.Unix(-1<<40, 0).Year(), err)
	}
	got, err := f.s.ByRequest(ctx, "u2", "res-2")
	if err != nil || got.ID != ids[2] {
		t.Fatalf("ByRequest(u2, res-2) = %d, %v; want %d", got.ID, err, ids[2])
	}
	if _, err := f.s.ByRequest(ctx, "u1", "res-2"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("another user's request id: %v, want ErrNotFound", err)
	}
	many, err := f.s.GetMany(ctx, append(ids, ids[0]+1<<20))
	if err != nil || len(many) != 4 || many[ids[3]].User != "u3" {
		t.Fatalf("GetMany = %d orders, %v", len(many), err)
	}

	f.pay(many[ids[0]], "txn-0")
	if _, err := f.s.CancelOrder(ctx, ids[1], order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	st, holds, err := f.s.Holds(ctx, "flash")
	if err != nil {
		t.Fatal(err)
	}
	state := map[int64]string{}
	held := int64(0)
	for _, h := range holds {
		state[h.Order] = h.State
		if h.State != order.HoldReleased {
			held += h.Qty
		}
	}
	want := map[int64]string{ids[0]: order.HoldSold, ids[1]: order.HoldReleased, ids[2]: order.HoldReserved, ids[3]: order.HoldReserved}
	if fmt.Sprint(state) != fmt.Sprint(want) || st.Available+held != 5 || st.Available != 2 {
		t.Fatalf("holds %v (want %v), available %d + held %d", state, want, st.Available, held)
	}
	if _, _, err := f.s.Holds(ctx, "nope"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("holds of an unknown SKU: %v", err)
	}
}

// Two services with different Redis namespaces over the same databases
// (two deployments, or a test beside a job) share the order tables, so they
// must share the order numbers: none is issued twice.
func TestNamespacesShareNumbers(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 100, 1000)
	other, err := order.New(f.r.Client, f.dbs, order.Config{TablesPerDB: 2, Namespace: f.r.Namespace + ":other", Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	seen := map[int64]bool{}
	for i := range 50 {
		for j, s := range []*order.Service{f.s, other} {
			o, err := s.Create(ctx, order.NewOrder{User: fmt.Sprint("u", i), RequestID: fmt.Sprint("r", j), Lines: []order.Line{{SKU: "s", Qty: 1}}})
			if err != nil {
				t.Fatalf("service %d, order %d: %v", j, i, err)
			}
			if seen[o.ID] {
				t.Fatalf("order number %d issued twice", o.ID)
			}
			seen[o.ID] = true
		}
	}
}
