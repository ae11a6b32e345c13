package order

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Limits on input.
const (
	maxItems = 50
	maxQty   = 1_000_000
	maxUnits = 1 << 40 // stock of one SKU
	maxMoney = 1 << 50 // fen: ~11 trillion yuan, far from int64 overflow in sums
)

// Line is one SKU and a quantity of it: what a buyer asks for (the price is
// the server's), what a parcel carries, what a line refund gives back.
type Line struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
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
	// PayBy is the payment deadline when the caller set one already (a
	// flash sale's reservation told the buyer when it lapses); zero: now +
	// Config.PayTimeout.
	PayBy time.Time
}

func (n NewOrder) validate() error {
	if err := validUser(n.User); err != nil {
		return err
	}
	if err := validUser(n.RequestID); err != nil {
		return fmt.Errorf("%w: request id %q", ErrInvalid, n.RequestID)
	}
	if !n.PayBy.IsZero() && (n.PayBy.Year() < 2000 || n.PayBy.Year() > 9999) {
		return fmt.Errorf("%w: pay-by %v", ErrInvalid, n.PayBy)
	}
	return validLines(n.Lines)
}

// validLines checks the lines of a request: 1..50 of them, valid SKUs,
// quantities 1..1,000,000, no SKU twice (a repeated line is refused rather
// than merged: it is more often a client's bug than its intent).
func validLines(lines []Line) error {
	if len(lines) == 0 || len(lines) > maxItems {
		return fmt.Errorf("%w: %d lines (1..%d)", ErrInvalid, len(lines), maxItems)
	}
	seen := map[string]bool{}
	for _, l := range lines {
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

// itemOf returns the index of sku's line in items, or an ErrInvalid.
func itemOf(o *Order, sku string) (int, error) {
	for i, it := range o.Items {
		if it.SKU == sku {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: order %d has no line %s", ErrInvalid, o.ID, sku)
}

// sameLines reports whether two requests name the same lines, in any order.
func sameLines(a, b []Line) bool {
	if len(a) != len(b) {
		return false
	}
	qty := map[string]int64{}
	for _, l := range a {
		qty[l.SKU] = l.Qty
	}
	for _, l := range b {
		if q, ok := qty[l.SKU]; !ok || q != l.Qty {
			return false
		}
	}
	return true
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
	ctx, call := s.obs.create.Start(ctx)
	r := s.createBatch(ctx, []NewOrder{n})[0]
	return r.Order, call.End(r.Err)
}

// ByRequest returns the order user created with requestID (see
// NewOrder.RequestID), or ErrNotFound.
func (s *Service) ByRequest(ctx context.Context, user, requestID string) (Order, error) {
	ctx, call := s.obs.byRequest.Start(ctx)
	o, err := s.orderByRequest(ctx, user, requestID)
	return o, call.End(err)
}

func (s *Service) orderByRequest(ctx context.Context, user, requestID string) (Order, error) {
	if err := validUser(user); err != nil {
		return Order{}, err
	}
	if err := validUser(requestID); err != nil {
		return Order{}, fmt.Errorf("%w: request id %q", ErrInvalid, requestID)
	}
	return s.byRequest(ctx, s.shardOfUser(user).DB, user, requestID)
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
