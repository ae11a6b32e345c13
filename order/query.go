package order

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/shard"
)

// ErrBadCursor is returned for a cursor this package did not make.
var ErrBadCursor = fmt.Errorf("%w: bad cursor", ErrInvalid)

// UserOrders returns up to n of user's orders, newest first, after cursor
// ("" for the first page), and the cursor of the next page ("" at the end).
// They live in one table, read by the (user, id) index.
func (s *Service) UserOrders(ctx context.Context, user, cursor string, n int) ([]Order, string, error) {
	ctx, call := s.obs.userOrders.Start(ctx)
	list, next, err := s.userOrders(ctx, user, cursor, n)
	return list, next, call.End(err)
}

func (s *Service) userOrders(ctx context.Context, user, cursor string, n int) ([]Order, string, error) {
	if err := validUser(user); err != nil {
		return nil, "", err
	}
	if n < 1 || n > 200 {
		return nil, "", fmt.Errorf("%w: page size %d (1..200)", ErrInvalid, n)
	}
	before := int64(1<<63 - 1)
	if cursor != "" {
		id, err := strconv.ParseInt(cursor, 36, 64)
		if err != nil || id <= 0 {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
		before = id
	}
	sh := s.shardOfUser(user)
	var rows []row
	if err := sh.DB.SelectContext(ctx, &rows, `SELECT `+orderColumns+` FROM `+sh.Table+` WHERE user_id = ? AND id < ? ORDER BY id DESC LIMIT ?`, user, before, n); err != nil {
		return nil, "", fmt.Errorf("order: orders of %s: %w", user, err)
	}
	out, err := orders(rows)
	if err != nil || len(out) < n {
		return out, "", err
	}
	return out, strconv.FormatInt(out[len(out)-1].ID, 36), nil
}

func orders(rows []row) ([]Order, error) {
	out := make([]Order, len(rows))
	for i, r := range rows {
		o, err := r.order()
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

// Filter selects orders across all tables for operators.
type Filter struct {
	Status   Status    // "" for any
	From, To time.Time // created in [From, To); zero: unbounded
}

// Search returns up to n orders matching f, newest first (by creation time,
// then id), after cursor, from every table at once (scatter-gather, each
// table asked for at most n through its created_at index, merged in order),
// and the next cursor ("" at the end).
func (s *Service) Search(ctx context.Context, f Filter, cursor string, n int) ([]Order, string, error) {
	ctx, call := s.obs.search.Start(ctx)
	list, next, err := s.search(ctx, f, cursor, n)
	return list, next, call.End(err)
}

func (s *Service) search(ctx context.Context, f Filter, cursor string, n int) ([]Order, string, error) {
	if n < 1 || n > 500 {
		return nil, "", fmt.Errorf("%w: page size %d (1..500)", ErrInvalid, n)
	}
	afterAt, afterID := int64(1<<62), int64(1<<63-1)
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		at, id, ok := strings.Cut(string(raw), ":")
		var e1, e2 error
		afterAt, e1 = strconv.ParseInt(at, 10, 64)
		afterID, e2 = strconv.ParseInt(id, 10, 64)
		if err != nil || !ok || e1 != nil || e2 != nil {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
	}
	where := `(created_at < ? OR (created_at = ? AND id < ?))`
	args := []any{afterAt, afterAt, afterID}
	if f.Status != "" {
		where += ` AND status = ?`
		args = append(args, string(f.Status))
	}
	if !f.From.IsZero() {
		where += ` AND created_at >= ?`
		args = append(args, ms(f.From))
	}
	if !f.To.IsZero() {
		where += ` AND created_at < ?`
		args = append(args, ms(f.To))
	}
	newer := func(a, b Order) bool {
		return a.CreatedAt.After(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID > b.ID
	}
	out, err := shard.Gather(ctx, s.reports.All(), 16, func(ctx context.Context, sh shard.Shard) ([]Order, error) {
		var rows []row
		q := `SELECT ` + orderColumns + ` FROM ` + sh.Table + ` WHERE ` + where + ` ORDER BY created_at DESC, id DESC LIMIT ?`
		if err := sh.DB.SelectContext(ctx, &rows, q, append(args, n)...); err != nil {
			return nil, fmt.Errorf("order: search %s: %w", sh.Table, err)
		}
		return orders(rows)
	}, newer, n)
	if err != nil || len(out) < n {
		return out, "", err
	}
	last := out[len(out)-1]
	return out, base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("%d:%d", ms(last.CreatedAt), last.ID))), nil
}

// DayStats counts the orders created in a period.
type DayStats struct {
	Day        time.Time // the local day's first instant (Daily); zero for Stats
	Orders     int64     // created in the period
	Paid       int64     // of those, paid (or later states that were paid)
	PaidAmount int64     // their amount, in fen
}

// Stats counts the orders created in [from, to) over every table.
func (s *Service) Stats(ctx context.Context, from, to time.Time) (DayStats, error) {
	ctx, call := s.obs.stats.Start(ctx)
	day, err := s.stats(ctx, from, to)
	return day, call.End(err)
}

func (s *Service) stats(ctx context.Context, from, to time.Time) (DayStats, error) {
	if !from.Before(to) {
		return DayStats{}, fmt.Errorf("%w: stats over [%v, %v)", ErrInvalid, from, to)
	}
	days, err := s.count(ctx, []time.Time{from, to})
	if err != nil {
		return DayStats{}, err
	}
	days[0].Day = time.Time{}
	return days[0], nil
}

// maxDays bounds a Daily report.
const maxDays = 366

// Daily counts the orders created on each local day in loc from the day of
// from through the day before to's (at most 366 days): one query per table,
// grouped by day, summed over the tables. Days start at local midnight, so
// a day is 23 or 25 hours long across a DST change.
func (s *Service) Daily(ctx context.Context, from, to time.Time, loc *time.Location) ([]DayStats, error) {
	ctx, call := s.obs.daily.Start(ctx)
	days, err := s.daily(ctx, from, to, loc)
	return days, call.End(err)
}

func (s *Service) daily(ctx context.Context, from, to time.Time, loc *time.Location) ([]DayStats, error) {
	if loc == nil {
		return nil, fmt.Errorf("%w: daily stats need a location", ErrInvalid)
	}
	y, m, d := from.In(loc).Date()
	first := time.Date(y, m, d, 0, 0, 0, 0, loc)
	bounds := []time.Time{first}
	for day := first; day.Before(to); {
		y, m, d := day.Date()
		day = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		bounds = append(bounds, day)
		if len(bounds) > maxDays+1 {
			return nil, fmt.Errorf("%w: daily stats over more than %d days", ErrInvalid, maxDays)
		}
	}
	if len(bounds) < 2 {
		return nil, fmt.Errorf("%w: daily stats over [%v, %v)", ErrInvalid, from, to)
	}
	return s.count(ctx, bounds)
}

// count returns, for each period [bounds[i], bounds[i+1]), the orders
// created in it, from the read replicas when there are any.
func (s *Service) count(ctx context.Context, bounds []time.Time) ([]DayStats, error) {
	var day strings.Builder // the period index of created_at, in SQL
	args := make([]any, 0, len(bounds)+1)
	day.WriteString("CASE")
	for i, b := range bounds[1:] {
		fmt.Fprintf(&day, " WHEN created_at < ? THEN %d", i)
		args = append(args, ms(b))
	}
	day.WriteString(" END")
	args = append(args, ms(bounds[0]), ms(bounds[len(bounds)-1]))
	out := make([]DayStats, len(bounds)-1)
	for i := range out {
		out[i].Day = bounds[i]
	}
	type part struct {
		Day        int   `db:"day"`
		Orders     int64 `db:"orders"`
		Paid       int64 `db:"paid"`
		PaidAmount int64 `db:"paid_amount"`
	}
	parts, err := shard.Gather(ctx, s.reports.All(), 16, func(ctx context.Context, sh shard.Shard) ([]part, error) {
		var ps []part
		err := sh.DB.SelectContext(ctx, &ps, `SELECT `+day.String()+` AS day, COUNT(*) AS orders,
				COALESCE(SUM(CASE WHEN pay_no <> 0 THEN 1 ELSE 0 END), 0) AS paid,
				COALESCE(SUM(CASE WHEN pay_no <> 0 THEN amount ELSE 0 END), 0) AS paid_amount
			FROM `+sh.Table+` WHERE created_at >= ? AND created_at < ? GROUP BY 1`, args...)
		if err != nil {
			return nil, fmt.Errorf("order: stats %s: %w", sh.Table, err)
		}
		return ps, nil
	}, func(a, b part) bool { return false }, 0)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		out[p.Day].Orders += p.Orders
		out[p.Day].Paid += p.Paid
		out[p.Day].PaidAmount += p.PaidAmount
	}
	return out, nil
}

// GetMany returns the orders of ids that exist, by id, reading each table
// once (one IN query per table the ids route to).
func (s *Service) GetMany(ctx context.Context, ids []int64) (map[int64]Order, error) {
	ctx, call := s.obs.getMany.Start(ctx)
	byID, err := s.getMany(ctx, ids)
	return byID, call.End(err)
}

func (s *Service) getMany(ctx context.Context, ids []int64) (map[int64]Order, error) {
	byTable := map[shard.Shard][]int64{}
	for _, id := range ids {
		if id <= 0 {
			return nil, fmt.Errorf("%w: order id %d", ErrInvalid, id)
		}
		sh := s.shardOfID(id)
		byTable[sh] = append(byTable[sh], id)
	}
	out := make(map[int64]Order, len(ids))
	for sh, part := range byTable {
		for len(part) > 0 {
			chunk := part[:min(len(part), 500)]
			part = part[len(chunk):]
			q, args, err := sqlx.In(`SELECT `+orderColumns+` FROM `+sh.Table+` WHERE id IN (?)`, chunk)
			if err != nil {
				return nil, err
			}
			var rows []row
			if err := sh.DB.SelectContext(ctx, &rows, q, args...); err != nil {
				return nil, fmt.Errorf("order: read %s: %w", sh.Table, err)
			}
			got, err := orders(rows)
			if err != nil {
				return nil, err
			}
			for _, o := range got {
				out[o.ID] = o
			}
		}
	}
	return out, nil
}
