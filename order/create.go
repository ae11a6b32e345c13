package order

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// Limits on input.
const (
	maxItems = 50
	maxQty   = 1_000_000
	maxMoney = 1 << 50 // fen: ~11 trillion yuan, far from int64 overflow in sums
)

// Line is one SKU and quantity a buyer asks for; the price is the server's.
type Line struct {
	SKU string
	Qty int64
}

// NewOrder is a request to create an order.
type NewOrder struct {
	User string
	// RequestID makes the request idempotent per user (1..64 printable
	// ASCII): the client's request id, or e.g. campaign + user for a flash
	// sale. Creating again with the same id returns the existing order and
	// reserves nothing more.
	RequestID string
	Lines     []Line
}

func (n NewOrder) validate() error {
	if err := validUser(n.User); err != nil {
		return err
	}
	if err := validUser(n.RequestID); err != nil {
		return fmt.Errorf("%w: request id %q", ErrInvalid, n.RequestID)
	}
	if len(n.Lines) == 0 || len(n.Lines) > maxItems {
		return fmt.Errorf("%w: %d lines (1..%d)", ErrInvalid, len(n.Lines), maxItems)
	}
	seen := map[string]bool{}
	for _, l := range n.Lines {
		if err := validSKU(l.SKU); err != nil {
			return err
		}
		if l.Qty < 1 || l.Qty > maxQty {
			return fmt.Errorf("%w: quantity %d of %s (1..%d)", ErrInvalid, l.Qty, l.SKU, maxQty)
		}
		if seen[l.SKU] {
			return fmt.Errorf("%w: sku %s listed twice", ErrInvalid, l.SKU)
		}
		seen[l.SKU] = true
	}
	return nil
}

// Create records an order for n at the server's prices, reserves its stock
// and schedules its timeout. It is idempotent by (User, RequestID): a repeat
// — a client retry, a redelivered message — returns the order the first call
// made (finishing its reservation if that call died half-way) and reserves
// nothing twice.
//
// The order row is written first (pending, nothing reserved), then each SKU
// is reserved in the inventory shard that owns it (a different database: a
// TCC try keyed by order and SKU), then the order is marked reserved. If a
// SKU is short the order is closed with ReasonOutOfStock, the reservations
// already made are cancelled, and the error is ErrOutOfStock. An order that
// is never marked reserved cannot be paid (a callback for it becomes a
// refund) and is closed at its deadline.
func (s *Service) Create(ctx context.Context, n NewOrder) (Order, error) {
	if err := n.validate(); err != nil {
		return Order{}, err
	}
	sh := s.shardOfUser(n.User)
	o, err := s.byRequest(ctx, sh.DB, n.User, n.RequestID)
	if errors.Is(err, ErrNotFound) {
		o, err = s.insert(ctx, n)
	}
	if err != nil {
		return Order{}, err
	}
	return s.reserve(ctx, o)
}

func (s *Service) byRequest(ctx context.Context, q querier, user, request string) (Order, error) {
	sh := s.shardOfUser(user)
	var r row
	err := q.GetContext(ctx, &r, `SELECT `+orderColumns+` FROM `+sh.Table+` WHERE user_id = ? AND request_id = ?`, user, request)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: request %s of %s", ErrNotFound, request, user)
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: read request %s: %w", request, err)
	}
	return r.order()
}

// insert writes a new pending order (and its "created" event) at the
// server's prices; a concurrent twin of the request returns the winner's row.
func (s *Service) insert(ctx context.Context, n NewOrder) (Order, error) {
	items, amount, err := s.price(ctx, n.Lines)
	if err != nil {
		return Order{}, err
	}
	id, err := s.newID(ctx, n.User)
	if err != nil {
		return Order{}, err
	}
	now := s.cfg.Now()
	o := Order{
		ID: id, User: n.User, RequestID: n.RequestID, Status: Pending, Version: 1, Amount: amount,
		Currency: s.cfg.Currency, Items: items, CreatedAt: instant(ms(now)), PayDeadline: instant(ms(now.Add(s.cfg.PayTimeout))),
		UpdatedAt: instant(ms(now)),
	}
	itemsJSON, _ := json.Marshal(items) // plain structs: cannot fail
	sh := s.shardOfID(id)
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+sh.Table+` (`+orderColumns+`)
			VALUES (?, ?, ?, ?, 1, ?, ?, ?, 0, '', 0, 0, ?, ?, 0, 0, ?)`,
			o.ID, o.User, o.RequestID, string(Pending), o.Amount, o.Currency, string(itemsJSON),
			ms(now), ms(o.PayDeadline), ms(now))
		if err != nil {
			return err
		}
		return s.emit(ctx, tx, sh, Event{Kind: EventCreated, OrderID: o.ID, User: o.User, To: Pending, Version: 1, Amount: o.Amount, At: ms(now)})
	})
	if sqlutil.IsDuplicate(err) {
		return s.byRequest(ctx, sh.DB, n.User, n.RequestID)
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: create: %w", err)
	}
	s.schedule(ctx, queueClose, o.ID, o.PayDeadline)
	return o, nil
}

// price fills each line's unit price from the inventory and sums the order.
func (s *Service) price(ctx context.Context, lines []Line) ([]Item, int64, error) {
	items := make([]Item, len(lines))
	var amount int64
	for i, l := range lines {
		st, err := s.StockOf(ctx, l.SKU)
		if err != nil {
			return nil, 0, err
		}
		items[i] = Item{SKU: l.SKU, Qty: l.Qty, Price: st.Price}
		if amount += st.Price * l.Qty; amount > maxMoney {
			return nil, 0, fmt.Errorf("%w: order total above %d", ErrInvalid, int64(maxMoney))
		}
	}
	// Reserve in SKU order, so two orders never wait on each other's SKUs.
	slices.SortFunc(items, func(a, b Item) int { return cmp.Compare(a.SKU, b.SKU) })
	return items, amount, nil
}

// reserve makes o's reservations and marks it reserved; an order that is
// no longer pending, or already reserved, is returned as it is.
func (s *Service) reserve(ctx context.Context, o Order) (Order, error) {
	if o.Status != Pending || o.stock != stockNone {
		return o, nil
	}
	for _, it := range o.Items {
		err := s.Reserve(ctx, o.ID, it.SKU, it.Qty)
		if errors.Is(err, ErrOutOfStock) || errors.Is(err, ErrHanging) || errors.Is(err, ErrNotFound) {
			closed, cerr := s.close(ctx, o.ID, ReasonOutOfStock)
			if cerr != nil {
				return o, errors.Join(err, cerr)
			}
			return closed, err
		}
		if err != nil {
			return o, err
		}
	}
	sh := s.shardOfID(o.ID)
	res, err := sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET stock = ? WHERE id = ? AND status = ? AND stock = ?`,
		stockReserved, o.ID, string(Pending), stockNone)
	if err != nil {
		return o, fmt.Errorf("order: mark %d reserved: %w", o.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return s.Get(ctx, o.ID) // closed meanwhile (its close cancels what we reserved)
	}
	o.stock, o.Reserved = stockReserved, true
	return o, nil
}
