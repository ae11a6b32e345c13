package order_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// Operators' queries over every table: Search filtered by status and time
// window pages through exactly the matching orders, newest first; Daily
// counts by local day across a DST change (a 23-hour day); Stats sums a
// window. Bad windows are refused.
func TestSearchAndDailyStats(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("pen", 150, 1000)
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	// Three local days in Los Angeles around this year's spring forward:
	// the day before, the 23-hour day, the day after.
	type made struct {
		o    order.Order
		paid bool
	}
	var all []made
	dst := springForward(testenv.Now().Year(), la)
	day0 := time.Date(dst.Year(), dst.Month(), dst.Day()-1, 0, 0, 0, 0, la)
	localDay := func(n int) time.Time { return time.Date(day0.Year(), day0.Month(), day0.Day()+n, 0, 0, 0, 0, la) }
	for i := range 30 {
		f.clk.Set(day0.Add(time.Duration(i) * 2 * time.Hour)) // 0:00, 2:00, … across three local days
		o := f.create(fmt.Sprint("buyer", i%7), fmt.Sprint("req", i), order.Line{SKU: "pen", Qty: int64(1 + i%3)})
		paid := i%3 != 0
		if paid {
			f.pay(o, fmt.Sprint("tx", i))
		}
		all = append(all, made{o, paid})
	}
	from, to := day0, localDay(3)

	// Daily and Stats against the model.
	days, err := f.s.Daily(ctx, from, to, la)
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 3 || days[1].Day.Sub(days[0].Day) != 24*time.Hour || days[2].Day.Sub(days[1].Day) != 23*time.Hour {
		t.Fatalf("days %+v; want %s, %s (23 h, DST) and %s", days, day0.Format("Jan 2"), localDay(1).Format("Jan 2"), localDay(2).Format("Jan 2"))
	}
	var total order.DayStats
	for _, d := range days {
		var want order.DayStats
		for _, m := range all {
			if !m.o.CreatedAt.Before(d.Day) && m.o.CreatedAt.Before(d.Day.AddDate(0, 0, 1)) {
				want.Orders++
				if m.paid {
					want.Paid++
					want.PaidAmount += m.o.Amount
				}
			}
		}
		if d.Orders != want.Orders || d.Paid != want.Paid || d.PaidAmount != want.PaidAmount || d.Orders == 0 {
			t.Errorf("%s: %+v, want %+v", d.Day.Format("Jan 2"), d, want)
		}
		total.Orders, total.Paid, total.PaidAmount = total.Orders+d.Orders, total.Paid+d.Paid, total.PaidAmount+d.PaidAmount
	}
	if total.Orders != int64(len(all)) {
		t.Errorf("the days hold %d orders of %d", total.Orders, len(all))
	}
	if st, err := f.s.Stats(ctx, from, to); err != nil || st != total {
		t.Errorf("Stats %+v (%v), want the days' sum %+v", st, err, total)
	}

	// Search: paid orders of the DST day, three at a time, newest first.
	winFrom, winTo := localDay(1), localDay(2)
	var want []int64
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if m.paid && !m.o.CreatedAt.Before(winFrom) && m.o.CreatedAt.Before(winTo) {
			want = append(want, m.o.ID)
		}
	}
	var got []int64
	cursor := ""
	for range 100 {
		page, next, err := f.s.Search(ctx, order.Filter{Status: order.Paid, From: winFrom, To: winTo}, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			got = append(got, o.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(want) < 4 || !slices.Equal(got, want) {
		t.Errorf("Search paid on the 8th: %v, want %v", got, want)
	}

	for name, call := range map[string]func() error{
		"daily without a location": func() error { _, err := f.s.Daily(ctx, from, to, nil); return err },
		"daily over two years":     func() error { _, err := f.s.Daily(ctx, from, from.AddDate(2, 0, 0), la); return err },
		"daily over nothing":       func() error { _, err := f.s.Daily(ctx, to, from, la); return err },
		"stats over nothing":       func() error { _, err := f.s.Stats(ctx, to, to); return err },
	} {
		if err := call(); !errors.Is(err, order.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// With ReadReplicas the operators' queries read the replicas and nothing
// else: replicas that are empty databases answer nothing while the
// primaries hold orders; the primaries as their own replicas answer all.
func TestReadReplicas(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	primaries, empty := testenv.NewSQLs(t, 2), testenv.NewSQLs(t, 2)
	open := func(replicas []*sqlx.DB) *order.Service {
		t.Helper()
		s, err := order.New(r.Client, primaries, order.Config{Namespace: r.Namespace, TablesPerDB: 2, ReadReplicas: replicas, Now: testenv.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	writer := open(nil)
	if err := writer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// The replicas have the tables and none of the rows.
	schema, err := order.New(r.Client, empty, order.Config{Namespace: r.Namespace, TablesPerDB: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer schema.Close()
	if err := schema.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lagging := open(empty)
	if err := writer.PutSKU(ctx, "pen", 150, 100); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := writer.Create(ctx, order.NewOrder{User: fmt.Sprint("u", i), RequestID: "r", Lines: []order.Line{{SKU: "pen", Qty: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	from, to := testenv.Now().Add(-time.Hour), testenv.Now().Add(time.Hour)
	count := func(s *order.Service) (int, int64) {
		t.Helper()
		page, _, err := s.Search(ctx, order.Filter{}, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Stats(ctx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return len(page), st.Orders
	}
	if n, st := count(writer); n != 5 || st != 5 {
		t.Fatalf("on the primaries: %d found, %d counted; want 5", n, st)
	}
	if n, st := count(lagging); n != 0 || st != 0 {
		t.Fatalf("on empty replicas: %d found, %d counted; want 0 (the queries read the primaries)", n, st)
	}
	if n, st := count(open(primaries)); n != 5 || st != 5 {
		t.Fatalf("the primaries as replicas: %d found, %d counted; want 5", n, st)
	}
	if _, err := order.New(r.Client, primaries, order.Config{ReadReplicas: empty[:1]}); !errors.Is(err, order.ErrConfig) {
		t.Fatalf("one replica for two databases: %v, want ErrConfig", err)
	}
}

// springForward returns the first instant of year at which loc's offset
// grows (the start of daylight saving time), to the hour.
func springForward(year int, loc *time.Location) time.Time {
	at := time.Date(year, 1, 1, 0, 0, 0, 0, loc)
	_, off := at.Zone()
	for at.Year() == year {
		next := at.Add(time.Hour)
		if _, o := next.Zone(); o > off {
			return next
		}
		at = next
	}
	panic(fmt.Sprintf("%s has no daylight saving time in %d", loc, year))
}
