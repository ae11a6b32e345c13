package order

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Item is one line of an order. Price is the unit price in the currency's
// smallest unit (fen), taken from the inventory when the order is created:
// the server's price is the only price. Shipped and Refunded count the
// line's units in parcels (ShipParcel, Ship) and in line refunds
// (RefundLines); a refund takes the line's unshipped units first, and only
// beyond them is it a return of shipped ones.
type Item struct {
	SKU      string `json:"sku"`
	Qty      int64  `json:"qty"`
	Price    int64  `json:"price"`
	Shipped  int64  `json:"shipped,omitempty"`
	Refunded int64  `json:"refunded,omitempty"`
}

// ToShip is how many of the line's units are still to ship: bought, not
// shipped, not refunded.
func (it Item) ToShip() int64 { return max(0, it.Qty-it.Shipped-it.Refunded) }

// toShip is how many units of every line are still to ship, and how many
// have shipped.
func toShip(items []Item) (left, shipped int64) {
	for _, it := range items {
		left += it.ToShip()
		shipped += it.Shipped
	}
	return left, shipped
}

// Stock settlement of an order's reservations.
const (
	stockNone     = 0 // nothing reserved yet
	stockReserved = 1 // every item reserved (tried)
	stockSettled  = 2 // reservations confirmed (paid) or cancelled (closed)
)

// Order is one order as stored.
type Order struct {
	ID          int64
	User        string
	RequestID   string
	Status      Status
	Version     int64
	Amount      int64 // total in fen
	Currency    string
	Items       []Item
	Reserved    bool   // every item's stock is reserved or already settled
	Settled     bool   // its stock is settled: confirmed (paid) or released (closed)
	CloseReason string // why a Closed order closed
	PayNo       int64  // the payment attempt that paid it
	Refunded    int64  // refunded so far, in fen
	CreatedAt   time.Time
	PayDeadline time.Time
	PaidAt      time.Time // zero until paid
	ShippedAt   time.Time // zero until shipped: when its last unit shipped (or was refunded) and it became Shipped
	UpdatedAt   time.Time

	stock int
}

// row is an order's columns.
type row struct {
	ID          int64  `db:"id"`
	User        string `db:"user_id"`
	RequestID   string `db:"request_id"`
	Status      string `db:"status"`
	Version     int64  `db:"version"`
	Amount      int64  `db:"amount"`
	Currency    string `db:"currency"`
	Items       string `db:"items"`
	Stock       int    `db:"stock"`
	CloseReason string `db:"close_reason"`
	PayNo       int64  `db:"pay_no"`
	Refunded    int64  `db:"refunded"`
	CreatedAt   int64  `db:"created_at"`
	PayDeadline int64  `db:"pay_deadline"`
	PaidAt      int64  `db:"paid_at"`
	ShippedAt   int64  `db:"shipped_at"`
	UpdatedAt   int64  `db:"updated_at"`
}

const orderColumns = `id, user_id, request_id, status, version, amount, currency, items, stock, close_reason,
	pay_no, refunded, created_at, pay_deadline, paid_at, shipped_at, updated_at`

func instant(msec int64) time.Time {
	if msec == 0 {
		return time.Time{}
	}
	return time.UnixMilli(msec)
}

func (r row) order() (Order, error) {
	o := Order{
		ID: r.ID, User: r.User, RequestID: r.RequestID, Status: Status(r.Status), Version: r.Version,
		Amount: r.Amount, Currency: r.Currency, Reserved: r.Stock != stockNone, Settled: r.Stock == stockSettled, CloseReason: r.CloseReason,
		PayNo: r.PayNo, Refunded: r.Refunded, CreatedAt: instant(r.CreatedAt), PayDeadline: instant(r.PayDeadline),
		PaidAt: instant(r.PaidAt), ShippedAt: instant(r.ShippedAt), UpdatedAt: instant(r.UpdatedAt), stock: r.Stock,
	}
	if err := json.Unmarshal([]byte(r.Items), &o.Items); err != nil {
		return Order{}, fmt.Errorf("order: order %d has unreadable items: %w", r.ID, err)
	}
	if _, shipped := toShip(o.Items); shipped == 0 && (o.Status == Shipped || o.Status == Completed) {
		// Shipped whole before lines counted their units (no order ships
		// nothing and becomes Shipped now): every unit went.
		for i := range o.Items {
			o.Items[i].Shipped = o.Items[i].Qty
		}
	}
	return o, nil
}

// querier is what reads need from a pool or a transaction.
type querier interface {
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// load reads order id from its shard; lock takes its row lock (inside a
// MySQL transaction).
func (s *Service) load(ctx context.Context, q querier, sh shard.Shard, id int64, lock bool) (Order, error) {
	var r row
	err := q.GetContext(ctx, &r, `SELECT `+orderColumns+` FROM `+sh.Table+` WHERE id = ?`+s.forUpdate(lock), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: order %d", ErrNotFound, id)
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: read order %d: %w", id, err)
	}
	return r.order()
}

func (s *Service) forUpdate(lock bool) string {
	if lock && s.isMySQL() {
		return " FOR UPDATE"
	}
	return ""
}

// Get returns order id, read from the one table its gene routes to.
func (s *Service) Get(ctx context.Context, id int64) (Order, error) {
	ctx, call := s.obs.get.Start(ctx)
	o, err := s.get(ctx, id)
	return o, call.End(err)
}

func (s *Service) get(ctx context.Context, id int64) (Order, error) {
	if id <= 0 {
		return Order{}, fmt.Errorf("%w: order id %d", ErrInvalid, id)
	}
	return s.load(ctx, s.shardOfID(id).DB, s.shardOfID(id), id, false)
}

// update applies one transition of the state machine to o inside tx: a
// conditional UPDATE on o's status and version (the database is the
// guard), plus the extra assignments in set, and o's outbox event. It
// returns ErrConflict when the row moved on since o was read.
func (s *Service) update(ctx context.Context, tx *sqlx.Tx, o *Order, to Status, set string, args ...any) error {
	if !CanTransition(o.Status, to) {
		return illegal(o.ID, o.Status, to)
	}
	sh := s.shardOfID(o.ID)
	now := s.now()
	q := `UPDATE ` + sh.Table + ` SET status = ?, version = version + 1, updated_at = ?` + set +
		` WHERE id = ? AND status = ? AND version = ?`
	all := append(append([]any{string(to), now}, args...), o.ID, string(o.Status), o.Version)
	res, err := tx.ExecContext(ctx, q, all...)
	if err != nil {
		return fmt.Errorf("order: %s → %s: %w", o.Status, to, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("order: %s → %s: %w", o.Status, to, err)
	} else if n == 0 {
		return fmt.Errorf("%w: order %d is no longer %s v%d", ErrConflict, o.ID, o.Status, o.Version)
	}
	from := o.Status
	o.Status, o.Version, o.UpdatedAt = to, o.Version+1, instant(now)
	return s.emit(ctx, tx, Event{Kind: EventStatus, OrderID: o.ID, User: o.User, From: from, To: to, Version: o.Version, Amount: o.Amount, At: now})
}

// save writes o's items and the extra assignments in set inside tx, moving
// it to status to (one transition of the state machine, with its event) or,
// when to is its status already, only bumping its version under the same
// conditional UPDATE: a change of an order's lines is guarded exactly as a
// transition is.
func (s *Service) save(ctx context.Context, tx *sqlx.Tx, o *Order, to Status, set string, args ...any) error {
	items, _ := json.Marshal(o.Items) // plain structs: cannot fail
	set = `, items = ?` + set
	args = append([]any{string(items)}, args...)
	if to != o.Status {
		return s.update(ctx, tx, o, to, set, args...)
	}
	sh := s.shardOfID(o.ID)
	now := s.now()
	res, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET version = version + 1, updated_at = ?`+set+` WHERE id = ? AND status = ? AND version = ?`,
		append(append([]any{now}, args...), o.ID, string(o.Status), o.Version)...)
	if err != nil {
		return fmt.Errorf("order: update %d: %w", o.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("order: update %d: %w", o.ID, err)
	} else if n == 0 {
		return fmt.Errorf("%w: order %d is no longer %s v%d", ErrConflict, o.ID, o.Status, o.Version)
	}
	o.Version, o.UpdatedAt = o.Version+1, instant(now)
	return nil
}

// inTx runs fn in a transaction on db, again from the start when the
// database aborted it for a deadlock or a busy lock.
func inTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return sqlutil.InTx(ctx, db, fn)
}
