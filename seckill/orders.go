package seckill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/outbox"
)

// Order statuses in SQL.
const (
	Pending  = "pending"
	Paid     = "paid"
	Released = "released" // not paid in time: units and quota returned
	Rejected = "rejected" // Redis sold a unit SQL did not have (Redis lost state)
)

// HandleOrder is the Kafka consumer of order messages (see OrderMessage):
// for each order in the message it creates the order row and makes the final
// deduction in SQL, in one transaction, guarded by "n >= qty" — so SQL never
// records more units sold than the SKU has, even if Redis lost its state and
// sold too many (those orders are Rejected). A redelivered message finds its
// rows and changes nothing. A malformed message, or one for a campaign SQL
// does not know, is ErrBadMessage and outbox.ErrPoison.
func (s *Service) HandleOrder(ctx context.Context, _, value []byte) error {
	m, err := DecodeOrderMessage(value)
	if err != nil {
		return outbox.Poison(err)
	}
	sl, err := s.Open(ctx, m.Campaign)
	if errors.Is(err, ErrNoCampaign) {
		return outbox.Poison(fmt.Errorf("%w: %w", ErrBadMessage, err))
	}
	if err != nil {
		return err
	}
	for _, o := range m.Orders {
		if _, b, _, _ := splitID(o.ID); b >= sl.c.Buckets {
			return outbox.Poison(fmt.Errorf("%w: order %s: campaign %s has %d buckets", ErrBadMessage, o.ID, sl.c.ID, sl.c.Buckets))
		}
	}
	for _, o := range m.Orders {
		if err := sl.createOrder(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// createOrder records one reservation as an order (see HandleOrder).
func (sl *Sale) createOrder(ctx context.Context, o Order) error {
	s, c := sl.s, sl.c
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO seckill_orders (id, campaign, user_id, qty, status, pay_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		o.ID, c.ID, o.User, o.Qty, Pending, o.PayBy.UnixMilli(), s.cfg.Now().UnixMilli())
	if sqlutil.IsDuplicate(err) { // delivered before, or released before it arrived — or a conflict
		return sameOrder(ctx, tx, c.ID, o)
	}
	if err != nil {
		return fmt.Errorf("seckill: insert order: %w", err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE seckill_stock SET n = n - ? WHERE sku = ? AND n >= ?`, o.Qty, c.SKU, o.Qty)
	if err != nil {
		return fmt.Errorf("seckill: deduct stock: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE seckill_orders SET status = ? WHERE id = ?`, Rejected, o.ID); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// sameOrder checks that the order recorded under o.ID is o, so that only a
// redelivery is taken for one.
func sameOrder(ctx context.Context, tx *sqlx.Tx, campaign string, o Order) error {
	var had struct {
		Campaign string `db:"campaign"`
		User     string `db:"user_id"`
		Qty      int64  `db:"qty"`
	}
	if err := tx.GetContext(ctx, &had, `SELECT campaign, user_id, qty FROM seckill_orders WHERE id = ?`, o.ID); err != nil {
		return fmt.Errorf("seckill: read order %s: %w", o.ID, err)
	}
	if had.Campaign != campaign || had.User != o.User || had.Qty != o.Qty {
		return outbox.Poison(fmt.Errorf("%w: %s is %s × %d of %s, the message says %s × %d of %s",
			ErrIDConflict, o.ID, had.User, had.Qty, had.Campaign, o.User, o.Qty, campaign))
	}
	return nil
}

// Pay marks a reservation paid. It is idempotent; it fails with ErrReleased
// when the timeout won the race (refund, never "paid"), and with ErrNotReady
// before the order row exists. It returns nil only once SQL records the order
// paid.
func (s *Service) Pay(ctx context.Context, id string) error {
	sl, b, err := s.reservation(ctx, id)
	if err != nil {
		return err
	}
	if err := s.markPaid(ctx, id); err != nil {
		return err
	}
	return sl.close(ctx, b, id, false)
}

// markPaid returns nil when its conditional UPDATE recorded the payment or
// the order was found paid before; the outcome never rests on a status read
// that a concurrent writer can change.
func (s *Service) markPaid(ctx context.Context, id string) error {
	for {
		res, err := s.db.ExecContext(ctx, `UPDATE seckill_orders SET status = ? WHERE id = ? AND status = ?`, Paid, id, Pending)
		if err != nil {
			return fmt.Errorf("seckill: pay: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var status string
		err = s.db.GetContext(ctx, &status, `SELECT status FROM seckill_orders WHERE id = ?`, id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotReady
		case err != nil:
			return fmt.Errorf("seckill: pay: %w", err)
		case status == Paid:
			return nil // a repeated callback
		case status == Released || status == Rejected:
			return fmt.Errorf("%w: %s is %s", ErrReleased, id, status)
		}
		// Pending: the row was created after the UPDATE looked; try again.
	}
}

// splitID splits a reservation id "<campaign>-<bucket>-<number>".
func splitID(id string) (campaign string, bucket int, n int64, err error) {
	j := strings.LastIndexByte(id, '-')
	i := -1
	if j > 0 {
		i = strings.LastIndexByte(id[:j], '-')
	}
	if i <= 0 {
		return "", 0, 0, fmt.Errorf("%w: reservation id %q", ErrInvalid, id)
	}
	bucket, err1 := strconv.Atoi(id[i+1 : j])
	n, err2 := strconv.ParseInt(id[j+1:], 10, 64)
	if err1 != nil || err2 != nil || bucket < 0 || n < 1 || !idPattern.MatchString(id[:i]) {
		return "", 0, 0, fmt.Errorf("%w: reservation id %q", ErrInvalid, id)
	}
	return id[:i], bucket, n, nil
}

// reservation finds the campaign and bucket of a reservation id.
func (s *Service) reservation(ctx context.Context, id string) (*Sale, int, error) {
	campaign, b, _, err := splitID(id)
	if err != nil {
		return nil, 0, err
	}
	sl, err := s.Open(ctx, campaign)
	if err != nil {
		return nil, 0, err
	}
	if b >= sl.c.Buckets {
		return nil, 0, fmt.Errorf("%w: reservation id %q", ErrInvalid, id)
	}
	return sl, b, nil
}

// close removes a reservation from its bucket (restocking it if asked) and,
// when restocked, gives the buyer's quota back, once.
func (sl *Sale) close(ctx context.Context, b int, id string, restock bool) error {
	flag := "0"
	if restock {
		flag = "1"
	}
	r, err := releaseScript.Run(ctx, sl.s.rdb, sl.bucketKeys(b, "stock", "res", "due"), id, flag).Text()
	if err != nil {
		return fmt.Errorf("seckill: close %s: %w", id, err)
	}
	if !restock || r == "" {
		return nil
	}
	user, qty, h, err := parseReservation(r)
	if err != nil {
		return err
	}
	return sl.unquota(ctx, user, qty, h, id)
}

func parseReservation(r string) (user string, qty int64, home int, err error) {
	i, j := strings.LastIndexByte(r, '|'), -1
	if i > 0 {
		j = strings.LastIndexByte(r[:i], '|')
	}
	if j < 0 {
		return "", 0, 0, fmt.Errorf("seckill: malformed reservation %q", r)
	}
	qty, err1 := strconv.ParseInt(r[j+1:i], 10, 64)
	home, err2 := strconv.Atoi(r[i+1:])
	if err1 != nil || err2 != nil {
		return "", 0, 0, fmt.Errorf("seckill: malformed reservation %q", r)
	}
	return r[:j], qty, home, nil
}

// ReleaseDue releases the reservations whose payment deadline passed
// and returns how many it released. SQL decides each one: the conditional
// UPDATE pending → released races Pay's pending → paid, and exactly one wins.
// A released order returns its units to SQL's stock in the same transaction,
// then to Redis with the buyer's quota. An order the consumer has not created
// yet is recorded as released first, so its late event changes nothing.
func (sl *Sale) ReleaseDue(ctx context.Context) (int, error) {
	s, c := sl.s, sl.c
	now := strconv.FormatInt(s.cfg.Now().UnixMilli(), 10)
	released := 0
	for b := range c.Buckets {
		due, err := s.rdb.ZRangeByScoreWithScores(ctx, sl.key(b, "due"), &redis.ZRangeBy{Min: "-inf", Max: now}).Result()
		if err != nil {
			return released, fmt.Errorf("seckill: due of %s/%d: %w", c.ID, b, err)
		}
		for _, z := range due {
			id := z.Member.(string)
			restock, err := sl.decideRelease(ctx, b, id, int64(z.Score))
			if err != nil {
				return released, err
			}
			if err := sl.close(ctx, b, id, restock); err != nil {
				return released, err
			}
			if restock {
				released++
			}
		}
	}
	return released, nil
}

// decideRelease settles id in SQL and reports whether its units go back.
func (sl *Sale) decideRelease(ctx context.Context, b int, id string, payBy int64) (bool, error) {
	s, c := sl.s, sl.c
	for range 3 {
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return false, err
		}
		res, err := tx.ExecContext(ctx, `UPDATE seckill_orders SET status = ? WHERE id = ? AND status = ?`, Released, id, Pending)
		if err != nil {
			tx.Rollback()
			return false, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			var qty int64
			if err := tx.GetContext(ctx, &qty, `SELECT qty FROM seckill_orders WHERE id = ?`, id); err != nil {
				tx.Rollback()
				return false, err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE seckill_stock SET n = n + ? WHERE sku = ?`, qty, c.SKU); err != nil {
				tx.Rollback()
				return false, err
			}
			return true, tx.Commit()
		}
		var status string
		err = tx.GetContext(ctx, &status, `SELECT status FROM seckill_orders WHERE id = ?`, id)
		if errors.Is(err, sql.ErrNoRows) {
			// The event is still on its way: record the release first.
			r, rerr := s.rdb.HGet(ctx, sl.key(b, "res"), id).Result()
			if errors.Is(rerr, redis.Nil) {
				tx.Rollback()
				return false, nil // already closed in Redis: nothing to release
			}
			if rerr != nil { // unknown: leave it for the next pass
				tx.Rollback()
				return false, fmt.Errorf("seckill: read reservation %s: %w", id, rerr)
			}
			user, qty, _, perr := parseReservation(r)
			if perr != nil {
				tx.Rollback()
				return false, perr
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO seckill_orders (id, campaign, user_id, qty, status, pay_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				id, c.ID, user, qty, Released, payBy, s.cfg.Now().UnixMilli())
			if sqlutil.IsDuplicate(err) {
				tx.Rollback()
				continue // the consumer got there first: decide again
			}
			if err != nil {
				tx.Rollback()
				return false, err
			}
			return true, tx.Commit()
		}
		tx.Rollback()
		if err != nil {
			return false, err
		}
		// Paid keeps its units; Rejected never had SQL units; Released
		// was decided before (Redis may not have been told).
		return status == Released, nil
	}
	return false, fmt.Errorf("seckill: release %s: kept racing the consumer", id)
}
