package order_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// A real InnoDB deadlock (error 1213) aborts an order's stock reservation
// half-way: the block's transaction holds SKU a's row and waits for b's,
// held by another transaction that then asks for a's. InnoDB rolls back the
// lighter of the two — the block's, since the other has inserted 2,000 rows
// first — and the block runs its whole transaction again. The order is
// created once and each SKU's stock is reserved exactly once.
func TestDeadlockInjected(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewSQL(t)
	if !sqlutil.IsMySQL(db) {
		t.Skip("SQLite serialises writers: no deadlock to inject (busy retries are covered in internal/sqlutil)")
	}
	r := testenv.NewRedis(t)
	s, err := order.New(r.Client, []*sqlx.DB{db}, order.Config{TablesPerDB: 2, Namespace: r.Namespace, Now: testenv.NewClock(start).Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sku := range []string{"a", "b"} {
		if err := s.PutSKU(ctx, sku, 100, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, order.NewOrder{User: "warm", RequestID: "w", Lines: []order.Line{{SKU: "a", Qty: 1}}}); err != nil {
		t.Fatal(err) // leases the order numbers: the next transactions are the reservation's
	}
	table := func(sku string) string {
		var tables []string
		if err := db.Select(&tables, `SELECT table_name FROM information_schema.columns WHERE table_schema = DATABASE() AND column_name = 'available'`); err != nil {
			t.Fatal(err)
		}
		for _, tb := range tables {
			var n int
			if err := db.Get(&n, "SELECT COUNT(*) FROM `"+tb+"` WHERE sku = ?", sku); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				return tb
			}
		}
		t.Fatalf("no inventory table holds %s", sku)
		return ""
	}
	invA, invB := table("a"), table("b")
	if _, err := db.Exec(`CREATE TABLE weight (id INT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	deadlocks := func() int64 {
		var name string
		var n int64
		if err := db.QueryRow(`SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'`).Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := deadlocks()

	// The other transaction: heavy, then holding b.
	other, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	var rows []string
	for i := range 2000 {
		rows = append(rows, fmt.Sprintf("(%d)", i))
	}
	if _, err := other.Exec(`INSERT INTO weight VALUES ` + strings.Join(rows, ",")); err != nil {
		t.Fatal(err)
	}
	var avail int64
	if err := other.Get(&avail, "SELECT available FROM `"+invB+"` WHERE sku = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	created := make(chan order.Result, 1)
	go func() {
		created <- s.CreateBatch(ctx, []order.NewOrder{{User: "u", RequestID: "r", Lines: []order.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}}})[0]
	}()
	// Wait until the block's transaction holds a and waits for b.
	var dbName string
	if err := db.Get(&dbName, `SELECT DATABASE()`); err != nil {
		t.Fatal(err)
	}
	// An inventory UPDATE running for 200 ms on this database is blocked:
	// on b's row, since nothing holds a's (innodb_trx's LOCK WAIT state was
	// not reliable on MariaDB 10.11: it showed such a wait as RUNNING).
	waiting := func() bool {
		var n int
		err := db.Get(&n, `SELECT COUNT(*) FROM information_schema.processlist
			WHERE db = ? AND info LIKE 'UPDATE inventory%' AND time_ms >= 200`, dbName)
		return err == nil && n >= 1
	}
	for deadline := testenv.Now().Add(30 * time.Second); !waiting(); time.Sleep(5 * time.Millisecond) {
		select {
		case res := <-created:
			t.Fatalf("the reservation finished without waiting for b's row: %+v, %v", res.Order, res.Err)
		default:
		}
		if testenv.Now().After(deadline) {
			var state []string
			db.Select(&state, `SELECT CONCAT_WS(' | ', p.id, p.command, p.state, p.info, t.trx_state, t.trx_query) FROM information_schema.processlist p
				LEFT JOIN information_schema.innodb_trx t ON t.trx_mysql_thread_id = p.id WHERE p.db = ?`, dbName)
			t.Fatalf("the reservation did not wait for b's row within 30 s; connections on the database:\n%s", strings.Join(state, "\n"))
		}
	}
	// Now ask for a: a cycle. InnoDB rolls the block's transaction back.
	if _, err := other.Exec("UPDATE `" + invA + "` SET available = available WHERE sku = 'a'"); err != nil {
		t.Fatalf("the heavy transaction was chosen as the victim: %v", err)
	}
	if got := deadlocks(); got <= before {
		t.Fatalf("Innodb_deadlocks %d → %d: no deadlock happened", before, got)
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}

	var res order.Result
	select {
	case res = <-created:
	case <-time.After(30 * time.Second):
		t.Fatal("the reservation did not finish after the deadlock")
	}
	if res.Err != nil || !res.Order.Reserved || res.Order.Status != order.Pending {
		t.Fatalf("order after the deadlock: %+v, %v", res.Order, res.Err)
	}
	for sku, want := range map[string]order.Stock{"a": {Available: 8, Locked: 2}, "b": {Available: 8, Locked: 2}} {
		st, err := s.StockOf(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if st.Available != want.Available || st.Locked != want.Locked || st.Sold != 0 {
			t.Errorf("%s: stock %+v, want %+v (each line reserved once)", sku, st, want)
		}
	}
	again, err := s.Create(ctx, order.NewOrder{User: "u", RequestID: "r", Lines: []order.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}})
	if err != nil || again.ID != res.Order.ID {
		t.Fatalf("the same request again: order %d, %v; want %d", again.ID, err, res.Order.ID)
	}
}
