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
// rows and changes nothing; an id recorded for another buyer, campaign or
// quantity is ErrIDConflict. A malformed message, or one for a campaign SQL
// does not know, is ErrBadMessage. Both are outbox.ErrPoison; any other error
// is transient.
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
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO seckill_orders (id, campaign, user_id, qty, status, pay_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
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
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE seckill_orders SET status = ? WHERE id = ?`, Rejected, o.ID)
		return err
	})
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
	_, err = sl.close(ctx, b, id, false)
	return err
}

// markPaid returns nil when its conditional UPDATE recorded the payment or
// the order was found paid before; the outcome never rests on a status read
// that a concurrent writer can change.
func (s *Service) markPaid(ctx context.Context, id string) error {
	return withRetry(ctx, func() error {
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
		return errDecideAgain // pending: the row was created after the UPDATE looked
	})
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
// It reports whether this call restocked it.
func (sl *Sale) close(ctx context.Context, b int, id string, restock bool) (bool, error) {
	flag := "0"
	if restock {
		flag = "1"
	}
	keys := sl.bucketKeys(b, "stock", "res", "due")
	keys = append(keys, sl.recent(b), sl.key(b, "version"))
	r, err := closeScript.Run(ctx, sl.s.rdb, keys, id, callID(), flag, sl.recentTTL()).Text()
	if err != nil {
		return false, fmt.Errorf("seckill: close %s: %w", id, err)
	}
	if !restock || r == "" {
		return false, nil
	}
	user, qty, h, err := parseReservation(r)
	if err != nil {
		return true, err
	}
	return true, sl.unquota(ctx, user, qty, h, id)
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

// ReleaseDue releases the reservations whose payment deadline passed and
// returns how many this pass returned to the stock (concurrent passes never
// count one twice). SQL decides each one: the conditional UPDATE pending →
// released races Pay's pending → paid, and exactly one wins. A released order
// returns its units to SQL's stock in the same transaction, then to Redis with
// the buyer's quota. An order the consumer has not created yet is recorded as
// released first, so its late event changes nothing. A reservation that meets
// an error stays due for the next pass; the others are still released.
func (sl *Sale) ReleaseDue(ctx context.Context) (int, error) {
	now := strconv.FormatInt(sl.s.cfg.Now().UnixMilli(), 10)
	released := 0
	var errs []error
	for b := range sl.c.Buckets {
		due, err := sl.s.rdb.ZRangeByScoreWithScores(ctx, sl.key(b, "due"), &redis.ZRangeBy{Min: "-inf", Max: now}).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("seckill: due of %s/%d: %w", sl.c.ID, b, err))
			continue
		}
		for _, z := range due {
			if err := ctx.Err(); err != nil {
				return released, errors.Join(append(errs, err)...)
			}
			restocked, err := sl.release(ctx, b, z.Member.(string), int64(z.Score))
			if restocked {
				released++
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return released, errors.Join(errs...)
}

// release settles one due reservation and reports whether this call
// returned its units to the stock.
func (sl *Sale) release(ctx context.Context, b int, id string, payBy int64) (bool, error) {
	restock, err := sl.decideRelease(ctx, b, id, payBy)
	if err != nil {
		return false, err
	}
	return sl.close(ctx, b, id, restock)
}

// decideRelease settles id in SQL and reports whether its units go back:
// this call released it, or a release was decided before (Redis may not have
// been told; the close script restocks once whoever runs it).
func (sl *Sale) decideRelease(ctx context.Context, b int, id string, payBy int64) (restock bool, err error) {
	err = sl.s.inTx(ctx, func(tx *sqlx.Tx) error {
		restock = false
		res, err := tx.ExecContext(ctx, `UPDATE seckill_orders SET status = ? WHERE id = ? AND status = ?`, Released, id, Pending)
		if err != nil {
			return fmt.Errorf("seckill: release %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			restock = true
			_, err := tx.ExecContext(ctx, `UPDATE seckill_stock SET n = n + (SELECT qty FROM seckill_orders WHERE id = ?) WHERE sku = ?`, id, sl.c.SKU)
			return err
		}
		var status string
		err = tx.GetContext(ctx, &status, `SELECT status FROM seckill_orders WHERE id = ?`, id)
		if errors.Is(err, sql.ErrNoRows) {
			restock, err = sl.releaseUnrecorded(ctx, tx, b, id, payBy)
			return err
		}
		// Paid keeps its units; Rejected never had SQL units; Released
		// was decided before.
		restock = status == Released
		return err
	})
	return restock, err
}

// releaseUnrecorded records as released a reservation whose order event is
// still on its way, so that the event changes nothing when it arrives.
func (sl *Sale) releaseUnrecorded(ctx context.Context, tx *sqlx.Tx, b int, id string, payBy int64) (bool, error) {
	r, err := sl.s.rdb.HGet(ctx, sl.key(b, "res"), id).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil // closed in Redis already: nothing to release
	}
	if err != nil { // unknown: leave it for the next pass
		return false, fmt.Errorf("seckill: read reservation %s: %w", id, err)
	}
	user, qty, _, err := parseReservation(r)
	if err != nil {
		return false, err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO seckill_orders (id, campaign, user_id, qty, status, pay_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		id, sl.c.ID, user, qty, Released, payBy, sl.s.cfg.Now().UnixMilli())
	if sqlutil.IsDuplicate(err) {
		return false, errDecideAgain // the consumer got there first
	}
	return err == nil, err
}
