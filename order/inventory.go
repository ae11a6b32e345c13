package order

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Stock is one SKU's inventory: units that can be sold, units reserved by
// unpaid orders, units sold. Available + Locked + Sold changes only when
// units are added.
type Stock struct {
	SKU       string `db:"sku"`
	Price     int64  `db:"price"`
	Available int64  `db:"available"`
	Locked    int64  `db:"locked"`
	Sold      int64  `db:"sold"`
}

// Reservation barrier states: a reservation (TCC "try") of one order's SKU,
// then its confirm or cancel, each applied once.
const (
	barrierTried     = "tried"
	barrierConfirmed = "confirmed"
	barrierCancelled = "cancelled"
)

// PutSKU creates sku with a unit price and units to sell, or sets the price
// and adds the units to an existing one.
func (s *Service) PutSKU(ctx context.Context, sku string, price, units int64) error {
	ctx, call := s.obs.putSKU.Start(ctx)
	return call.End(s.putSKU(ctx, sku, price, units))
}

func (s *Service) putSKU(ctx context.Context, sku string, price, units int64) error {
	if err := validSKU(sku); err != nil {
		return err
	}
	if price < 1 || units < 0 || price > maxMoney || units > maxUnits {
		return fmt.Errorf("%w: price %d, units %d", ErrInvalid, price, units)
	}
	sh := s.inventory.ByKey(sku)
	q := `INSERT INTO ` + sh.Table + ` (sku, price, available, locked, sold) VALUES (?, ?, ?, 0, 0)
		ON CONFLICT (sku) DO UPDATE SET price = excluded.price, available = available + excluded.available`
	if s.isMySQL() {
		q = `INSERT INTO ` + sh.Table + ` (sku, price, available, locked, sold) VALUES (?, ?, ?, 0, 0)
			ON DUPLICATE KEY UPDATE price = VALUES(price), available = available + VALUES(available)`
	}
	if err := sqlutil.Retry(ctx, 10, func() error { _, err := sh.DB.ExecContext(ctx, q, sku, price, units); return err }); err != nil {
		return fmt.Errorf("order: put sku %s: %w", sku, err)
	}
	return nil
}

// CreateSKU creates sku with a unit price and units to sell, once, and
// reports whether this call created it: creating it again with the same
// price and units changes nothing and reports false (a retry, or someone
// else's SKU with those numbers: the caller knows which), with others it is
// ErrInvalid. Use it where a SKU's stock is fixed when it is created, such
// as a flash sale's; PutSKU adds units.
func (s *Service) CreateSKU(ctx context.Context, sku string, price, units int64) (bool, error) {
	ctx, call := s.obs.createSKU.Start(ctx)
	created, err := s.createSKU(ctx, sku, price, units)
	return created, call.End(err)
}

func (s *Service) createSKU(ctx context.Context, sku string, price, units int64) (bool, error) {
	if err := validSKU(sku); err != nil {
		return false, err
	}
	if price < 1 || units < 0 || price > maxMoney || units > maxUnits {
		return false, fmt.Errorf("%w: price %d, units %d", ErrInvalid, price, units)
	}
	sh := s.inventory.ByKey(sku)
	err := sqlutil.Retry(ctx, 10, func() error {
		_, err := sh.DB.ExecContext(ctx, `INSERT INTO `+sh.Table+` (sku, price, available, locked, sold) VALUES (?, ?, ?, 0, 0)`, sku, price, units)
		return err
	})
	if !sqlutil.IsDuplicate(err) {
		if err != nil {
			return false, fmt.Errorf("order: create sku %s: %w", sku, err)
		}
		return true, nil
	}
	had, err := s.stockOf(ctx, sku)
	if err != nil {
		return false, err
	}
	if had.Price != price || had.Available+had.Locked+had.Sold != units {
		return false, fmt.Errorf("%w: sku %s exists with price %d and %d units", ErrInvalid, sku, had.Price, had.Available+had.Locked+had.Sold)
	}
	return false, nil
}

// StockOf returns sku's inventory.
func (s *Service) StockOf(ctx context.Context, sku string) (Stock, error) {
	ctx, call := s.obs.stockOf.Start(ctx)
	st, err := s.stockOf(ctx, sku)
	return st, call.End(err)
}

func (s *Service) stockOf(ctx context.Context, sku string) (Stock, error) {
	if err := validSKU(sku); err != nil {
		return Stock{}, err
	}
	sh := s.inventory.ByKey(sku)
	var st Stock
	err := sh.DB.GetContext(ctx, &st, `SELECT sku, price, available, locked, sold FROM `+sh.Table+` WHERE sku = ?`, sku)
	if errors.Is(err, sql.ErrNoRows) {
		return Stock{}, fmt.Errorf("%w: sku %s", ErrNotFound, sku)
	}
	if err != nil {
		return Stock{}, fmt.Errorf("order: stock of %s: %w", sku, err)
	}
	return st, nil
}

// Reserve moves qty units of sku from available to locked for order (the
// TCC "try"). It is keyed by (order, sku): a repeated Reserve changes
// nothing; a Reserve after that reservation's Cancel (a "hanging" try) is
// refused with ErrHanging; too few units is ErrOutOfStock and reserves
// nothing.
func (s *Service) Reserve(ctx context.Context, order int64, sku string, qty int64) error {
	ctx, call := s.obs.reserve.Start(ctx)
	return call.End(s.reserve(ctx, order, sku, qty))
}

func (s *Service) reserve(ctx context.Context, order int64, sku string, qty int64) error {
	if err := validSKU(sku); err != nil {
		return err
	}
	if qty < 1 || qty > maxQty {
		return fmt.Errorf("%w: quantity %d", ErrInvalid, qty)
	}
	return inTx(ctx, s.inventory.ByKey(sku).DB, func(tx *sqlx.Tx) error { return s.tryIn(ctx, tx, order, sku, qty) })
}

// tryIn is Reserve inside a caller's transaction; a short line leaves no
// trace (its barrier row is removed again).
func (s *Service) tryIn(ctx context.Context, tx *sqlx.Tx, order int64, sku string, qty int64) error {
	sh := s.inventory.ByKey(sku)
	barrier := gene.Sibling(sh, "inventory_tx")
	_, err := tx.ExecContext(ctx, `INSERT INTO `+barrier+` (order_id, sku, qty, state, updated_at) VALUES (?, ?, ?, ?, ?)`,
		order, sku, qty, barrierTried, s.now())
	if sqlutil.IsDuplicate(err) {
		return s.reservedBefore(ctx, tx, barrier, order, sku, qty)
	}
	if err != nil {
		return err
	}
	ok, err := s.take(ctx, tx, sh, sku, qty)
	if err != nil || ok {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+barrier+` WHERE order_id = ? AND sku = ?`, order, sku); err != nil {
		return err
	}
	return s.shortage(ctx, tx, sh, sku, qty)
}

// reservedBefore decides a Reserve whose barrier row exists: a repeat is a
// no-op, a try after the cancel is refused.
func (s *Service) reservedBefore(ctx context.Context, tx *sqlx.Tx, barrier string, order int64, sku string, qty int64) error {
	var b struct {
		Qty   int64  `db:"qty"`
		State string `db:"state"`
	}
	// A locking read: it sees the row a concurrent twin just committed,
	// which this transaction's snapshot may predate.
	if err := tx.GetContext(ctx, &b, `SELECT qty, state FROM `+barrier+` WHERE order_id = ? AND sku = ?`+s.forUpdate(true), order, sku); err != nil {
		return fmt.Errorf("order: read reservation %d/%s: %w", order, sku, err)
	}
	switch {
	case b.State == barrierCancelled:
		return fmt.Errorf("%w: order %d, sku %s", ErrHanging, order, sku)
	case b.Qty != qty:
		return fmt.Errorf("%w: order %d already reserved %d of %s, not %d", ErrInvalid, order, b.Qty, sku, qty)
	}
	return nil // reserved (or sold) before
}

// take moves qty of sku from available to locked if that many are
// available.
func (s *Service) take(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, sku string, qty int64) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET available = available - ?, locked = locked + ? WHERE sku = ? AND available >= ?`, qty, qty, sku, qty)
	if err != nil {
		return false, fmt.Errorf("order: reserve %s: %w", sku, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// shortage explains a failed take: an unknown SKU or too few units.
func (s *Service) shortage(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, sku string, qty int64) error {
	var known int
	if err := tx.GetContext(ctx, &known, `SELECT COUNT(*) FROM `+sh.Table+` WHERE sku = ?`, sku); err != nil {
		return fmt.Errorf("order: reserve %s: %w", sku, err)
	}
	if known == 0 {
		return fmt.Errorf("%w: sku %s", ErrNotFound, sku)
	}
	return fmt.Errorf("%w: %d of %s", ErrOutOfStock, qty, sku)
}

// Confirm turns order's reservation of sku into a sale (locked → sold),
// once. Confirming a cancelled or missing reservation is
// ErrIllegalTransition.
func (s *Service) Confirm(ctx context.Context, order int64, sku string) error {
	ctx, call := s.obs.confirm.Start(ctx)
	return call.End(s.settle(ctx, order, sku, barrierConfirmed))
}

// Cancel releases order's reservation of sku (locked → available), once. A
// Cancel that arrives before its Reserve (null compensation) records the
// cancel and changes no stock, so that the late Reserve is refused.
// Cancelling a confirmed sale is ErrIllegalTransition.
func (s *Service) Cancel(ctx context.Context, order int64, sku string) error {
	ctx, call := s.obs.cancel.Start(ctx)
	return call.End(s.settle(ctx, order, sku, barrierCancelled))
}

func (s *Service) settle(ctx context.Context, order int64, sku, to string) error {
	if err := validSKU(sku); err != nil {
		return err
	}
	for {
		err := s.settleOnce(ctx, order, sku, to)
		if !sqlutil.IsDuplicate(err) {
			return err
		}
		// A Reserve inserted the barrier between our read and our null
		// compensation: settle again, now against its row.
	}
}

func (s *Service) settleOnce(ctx context.Context, order int64, sku, to string) error {
	sh := s.inventory.ByKey(sku)
	barrier := gene.Sibling(sh, "inventory_tx")
	return inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		var b struct {
			Qty   int64  `db:"qty"`
			State string `db:"state"`
		}
		err := tx.GetContext(ctx, &b, `SELECT qty, state FROM `+barrier+` WHERE order_id = ? AND sku = ?`+s.forUpdate(true), order, sku)
		if errors.Is(err, sql.ErrNoRows) {
			if to == barrierConfirmed {
				return fmt.Errorf("%w: order %d never reserved %s", ErrIllegalTransition, order, sku)
			}
			// Null compensation: remember the cancel so a late try is refused.
			_, err = tx.ExecContext(ctx, `INSERT INTO `+barrier+` (order_id, sku, qty, state, updated_at) VALUES (?, ?, 0, ?, ?)`,
				order, sku, barrierCancelled, s.now())
			return err
		}
		if err != nil {
			return fmt.Errorf("order: read reservation %d/%s: %w", order, sku, err)
		}
		switch {
		case b.State == to:
			return nil // settled before
		case b.State != barrierTried:
			return fmt.Errorf("%w: reservation %d/%s is %s, cannot become %s", ErrIllegalTransition, order, sku, b.State, to)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+barrier+` SET state = ?, updated_at = ? WHERE order_id = ? AND sku = ? AND state = ?`,
			to, s.now(), order, sku, barrierTried); err != nil {
			return fmt.Errorf("order: settle %d/%s: %w", order, sku, err)
		}
		move := `locked = locked - ?, sold = sold + ?`
		if to == barrierCancelled {
			move = `locked = locked - ?, available = available + ?`
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET `+move+` WHERE sku = ?`, b.Qty, b.Qty, sku); err != nil {
			return fmt.Errorf("order: settle %d/%s: %w", order, sku, err)
		}
		return nil
	})
}

// Hold is one order's reservation of a SKU as the inventory records it.
type Hold struct {
	Order int64
	Qty   int64
	// State: HoldReserved (locked for the unpaid order), HoldSold (the
	// order was paid) or HoldReleased (the order closed; the units went back
	// to Available).
	State string
	// Returned is how many of a sold hold's units line refunds put back in
	// Available.
	Returned int64
}

// Hold states.
const (
	HoldReserved = barrierTried
	HoldSold     = barrierConfirmed
	HoldReleased = barrierCancelled
)

// Holds returns sku's stock and every order's reservation of it, read in one
// transaction: Available plus the units of the reserved holds and of the
// sold ones not returned (Qty − Returned) is the SKU's total at that
// instant. It reads every reservation the SKU ever
// had, so it is for reconciling a SKU of bounded sales (a flash sale's), not
// a catalogue's best seller.
func (s *Service) Holds(ctx context.Context, sku string) (Stock, []Hold, error) {
	ctx, call := s.obs.holds.Start(ctx)
	st, holds, err := s.holds(ctx, sku)
	return st, holds, call.End(err)
}

func (s *Service) holds(ctx context.Context, sku string) (Stock, []Hold, error) {
	if err := validSKU(sku); err != nil {
		return Stock{}, nil, err
	}
	sh := s.inventory.ByKey(sku)
	var st Stock
	var holds []Hold
	err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		err := tx.GetContext(ctx, &st, `SELECT sku, price, available, locked, sold FROM `+sh.Table+` WHERE sku = ?`, sku)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: sku %s", ErrNotFound, sku)
		}
		if err != nil {
			return fmt.Errorf("order: stock of %s: %w", sku, err)
		}
		var rows []struct {
			Order int64  `db:"order_id"`
			Qty   int64  `db:"qty"`
			State string `db:"state"`
		}
		if err := tx.SelectContext(ctx, &rows, `SELECT order_id, qty, state FROM `+gene.Sibling(sh, "inventory_tx")+` WHERE sku = ? AND qty > 0`, sku); err != nil {
			return fmt.Errorf("order: reservations of %s: %w", sku, err)
		}
		var returns []struct {
			Order int64 `db:"order_id"`
			Qty   int64 `db:"qty"`
		}
		if err := tx.SelectContext(ctx, &returns, `SELECT order_id, SUM(qty) AS qty FROM `+gene.Sibling(sh, "inventory_returns")+` WHERE sku = ? GROUP BY order_id`, sku); err != nil {
			return fmt.Errorf("order: returns of %s: %w", sku, err)
		}
		returned := map[int64]int64{}
		for _, r := range returns {
			returned[r.Order] = r.Qty
		}
		holds = holds[:0]
		for _, r := range rows {
			holds = append(holds, Hold{Order: r.Order, Qty: r.Qty, State: r.State, Returned: returned[r.Order]})
		}
		return nil
	})
	return st, holds, err
}

// returnStock moves qty units of sku from sold back to available for a
// line refund, once per (refund, sku): a repeat finds its barrier row and
// changes nothing.
func (s *Service) returnStock(ctx context.Context, refundNo, order int64, sku string, qty int64) error {
	sh := s.inventory.ByKey(sku)
	return inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "inventory_returns")+` (refund_no, sku, order_id, qty, returned_at) VALUES (?, ?, ?, ?, ?)`,
			refundNo, sku, order, qty, s.now())
		if sqlutil.IsDuplicate(err) {
			return nil // returned before
		}
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET sold = sold - ?, available = available + ? WHERE sku = ? AND sold >= ?`, qty, qty, sku, qty)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 { // the refund's order was confirmed first: only a broken record gets here
			return fmt.Errorf("order: return %d of %s for refund %d: fewer sold", qty, sku, refundNo)
		}
		return nil
	})
}
