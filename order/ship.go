package order

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Parcel is one shipment of some of an order's units.
type Parcel struct {
	ParcelNo  int64     `json:"parcel_no"`
	OrderID   int64     `json:"order_id"`
	RequestID string    `json:"request_id,omitempty"` // "" for the parcel of Ship
	Tracking  string    `json:"tracking,omitempty"`
	Lines     []Line    `json:"lines"`
	ShippedAt time.Time `json:"shipped_at"`
}

// NewParcel is a request to ship some of an order's units.
type NewParcel struct {
	// RequestID makes the request idempotent per order (1..64 printable
	// ASCII), e.g. the warehouse's shipment id: shipping again with it
	// returns the first parcel and ships nothing more.
	RequestID string
	// Lines are the SKUs and units in the parcel, each at most what its
	// line has left to ship (bought, not shipped, not refunded).
	Lines []Line
	// Tracking is the carrier's tracking number, optional (0..64 printable
	// ASCII).
	Tracking string
}

// ShipParcel ships p's units of a paid order and returns the parcel and
// the order after it: PartiallyShipped while units are left to ship,
// Shipped (ShippedAt set, AutoComplete scheduled) when none are. The order
// row, the lines' shipped counts, the parcel and its EventParcel are one
// transaction, so each parcel is shipped and announced exactly once. A
// repeat of p.RequestID returns the first parcel and the order as it now
// is, and ships nothing; the same id with other lines or tracking is
// ErrInvalid. Lines the order does not have, repeated, or of quantity 0 are
// ErrInvalid, more units than a line has left to ship is ErrQuantity, and
// an order that is not Paid or PartiallyShipped (an amount refund being
// paid back included) is ErrIllegalTransition: each changes nothing.
func (s *Service) ShipParcel(ctx context.Context, orderID int64, p NewParcel) (Parcel, Order, error) {
	ctx, call := s.obs.shipParcel.Start(ctx)
	parcel, o, err := s.shipParcel(ctx, orderID, p)
	return parcel, o, call.End(err)
}

func (s *Service) shipParcel(ctx context.Context, orderID int64, p NewParcel) (Parcel, Order, error) {
	if err := validUser(p.RequestID); err != nil {
		return Parcel{}, Order{}, fmt.Errorf("%w: parcel request id %q", ErrInvalid, p.RequestID)
	}
	if p.Tracking != "" && validUser(p.Tracking) != nil {
		return Parcel{}, Order{}, fmt.Errorf("%w: tracking number %q", ErrInvalid, p.Tracking)
	}
	if err := validLines(p.Lines); err != nil {
		return Parcel{}, Order{}, err
	}
	return s.ship(ctx, orderID, p)
}

// Ship ships everything a paid order has left to ship, as one parcel, and
// schedules its auto-completion: Paid or PartiallyShipped → Shipped. An
// order already shipped is returned unchanged (a retry is harmless); any
// other status, or a paid order with nothing left to ship (every unit
// refunded), is ErrIllegalTransition.
func (s *Service) Ship(ctx context.Context, id int64) (Order, error) {
	ctx, call := s.obs.ship.Start(ctx)
	o, err := s.shipAll(ctx, id)
	return o, call.End(err)
}

func (s *Service) shipAll(ctx context.Context, id int64) (Order, error) {
	_, o, err := s.ship(ctx, id, NewParcel{})
	return o, err
}

// ship ships p, or — with no lines — everything left.
func (s *Service) ship(ctx context.Context, id int64, p NewParcel) (Parcel, Order, error) {
	if id <= 0 {
		return Parcel{}, Order{}, fmt.Errorf("%w: order id %d", ErrInvalid, id)
	}
	sh := s.shardOfID(id)
	dedupe := dedupeKey("parcel", strconv.FormatInt(id, 10), p.RequestID)
	if p.RequestID != "" {
		if got, err := s.parcelBy(ctx, sh.DB, sh, dedupe); err == nil || !errors.Is(err, ErrNotFound) {
			return s.repeatedParcel(ctx, got, err, p)
		}
	}
	parcelNo, err := s.newIDWithGene(ctx, s.genes.Gene(id))
	if err != nil {
		return Parcel{}, Order{}, err
	}
	var o Order
	var parcel Parcel
	var twin bool
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		var err error
		if o, err = s.load(ctx, tx, sh, id, true); err != nil {
			return err
		}
		parcel, twin = Parcel{}, false
		if p.RequestID != "" {
			// A concurrent twin of the request may have shipped while this
			// one waited for the order's lock: answer with its parcel, not
			// with a refusal for want of units.
			got, err := s.parcelBy(ctx, tx, sh, dedupe)
			if err == nil {
				parcel, twin = got, true
				return nil
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		switch {
		case o.Status == Shipped && p.Lines == nil:
			return nil // Ship again: nothing left, nothing to do
		case o.Status != Paid && o.Status != PartiallyShipped:
			return fmt.Errorf("%w: order %d is %s: only a paid or partially shipped order ships", ErrIllegalTransition, id, o.Status)
		}
		lines := p.Lines
		if lines == nil {
			for _, it := range o.Items {
				if n := it.ToShip(); n > 0 {
					lines = append(lines, Line{SKU: it.SKU, Qty: n})
				}
			}
			if lines == nil {
				return fmt.Errorf("%w: order %d has nothing left to ship (every unit refunded)", ErrIllegalTransition, id)
			}
		}
		var value int64
		for _, l := range lines {
			i, err := itemOf(&o, l.SKU)
			if err != nil {
				return err
			}
			it := &o.Items[i]
			if l.Qty > it.ToShip() {
				return fmt.Errorf("%w: %d of %s asked, %d left to ship in order %d", ErrQuantity, l.Qty, l.SKU, it.ToShip(), id)
			}
			it.Shipped += l.Qty
			value += l.Qty * it.Price
		}
		now := s.now()
		to, set, args := PartiallyShipped, "", []any(nil)
		if left, _ := toShip(o.Items); left == 0 {
			to, set, args = Shipped, `, shipped_at = ?`, []any{now}
			o.ShippedAt = instant(now)
		}
		if err := s.save(ctx, tx, &o, to, set, args...); err != nil {
			return err
		}
		parcel = Parcel{ParcelNo: parcelNo, OrderID: id, RequestID: p.RequestID, Tracking: p.Tracking, Lines: lines, ShippedAt: instant(now)}
		items, _ := json.Marshal(lines) // plain structs: cannot fail
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "parcels")+` (parcel_no, order_id, dedupe, request_id, tracking, items, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			parcelNo, id, dedupe, p.RequestID, p.Tracking, string(items), now); err != nil {
			return err
		}
		return s.emit(ctx, tx, Event{ID: "p" + strconv.FormatInt(parcelNo, 10), Kind: EventParcel, OrderID: id, User: o.User,
			Version: o.Version, Amount: value, ParcelNo: parcelNo, Lines: lines, At: now})
	})
	if p.RequestID != "" && sqlutil.IsDuplicate(err) { // a concurrent twin of the request won
		got, err := s.parcelBy(ctx, sh.DB, sh, dedupe)
		return s.repeatedParcel(ctx, got, err, p)
	}
	if err != nil {
		return Parcel{}, Order{}, err
	}
	if twin {
		return s.repeatedParcel(ctx, parcel, nil, p)
	}
	if parcel.ParcelNo != 0 && o.Status == Shipped {
		s.schedule(ctx, queueComplete, id, o.ShippedAt.Add(s.cfg.AutoComplete))
	}
	return parcel, o, nil
}

// repeatedParcel answers a repeat of a parcel request: the first parcel and
// the order as it now is, if the repeat asks for the same.
func (s *Service) repeatedParcel(ctx context.Context, got Parcel, err error, p NewParcel) (Parcel, Order, error) {
	if err != nil {
		return Parcel{}, Order{}, err
	}
	if !sameLines(got.Lines, p.Lines) || got.Tracking != p.Tracking {
		return Parcel{}, Order{}, fmt.Errorf("%w: parcel request %q of order %d shipped other lines (parcel %d)", ErrInvalid, p.RequestID, got.OrderID, got.ParcelNo)
	}
	o, err := s.get(ctx, got.OrderID)
	return got, o, err
}

// parcelRow is a parcel's columns.
type parcelRow struct {
	ParcelNo  int64  `db:"parcel_no"`
	OrderID   int64  `db:"order_id"`
	RequestID string `db:"request_id"`
	Tracking  string `db:"tracking"`
	Items     string `db:"items"`
	CreatedAt int64  `db:"created_at"`
}

const parcelColumns = `parcel_no, order_id, request_id, tracking, items, created_at`

func (r parcelRow) parcel() (Parcel, error) {
	p := Parcel{ParcelNo: r.ParcelNo, OrderID: r.OrderID, RequestID: r.RequestID, Tracking: r.Tracking, ShippedAt: instant(r.CreatedAt)}
	if err := json.Unmarshal([]byte(r.Items), &p.Lines); err != nil {
		return Parcel{}, fmt.Errorf("order: parcel %d has unreadable lines: %w", r.ParcelNo, err)
	}
	return p, nil
}

func (s *Service) parcelBy(ctx context.Context, q querier, sh shard.Shard, dedupe string) (Parcel, error) {
	var r parcelRow
	err := q.GetContext(ctx, &r, `SELECT `+parcelColumns+` FROM `+gene.Sibling(sh, "parcels")+` WHERE dedupe = ?`, dedupe)
	if errors.Is(err, sql.ErrNoRows) {
		return Parcel{}, fmt.Errorf("%w: parcel request", ErrNotFound)
	}
	if err != nil {
		return Parcel{}, fmt.Errorf("order: read parcel: %w", err)
	}
	return r.parcel()
}

// Parcels lists the parcels of an order, oldest first. An order shipped
// whole before parcels existed has none.
func (s *Service) Parcels(ctx context.Context, orderID int64) ([]Parcel, error) {
	ctx, call := s.obs.parcels.Start(ctx)
	ps, err := s.parcelsOf(ctx, orderID)
	return ps, call.End(err)
}

func (s *Service) parcelsOf(ctx context.Context, orderID int64) ([]Parcel, error) {
	if orderID <= 0 {
		return nil, fmt.Errorf("%w: order id %d", ErrInvalid, orderID)
	}
	sh := s.shardOfID(orderID)
	var rows []parcelRow
	if err := sh.DB.SelectContext(ctx, &rows, `SELECT `+parcelColumns+` FROM `+gene.Sibling(sh, "parcels")+` WHERE order_id = ? ORDER BY parcel_no`, orderID); err != nil {
		return nil, fmt.Errorf("order: parcels of %d: %w", orderID, err)
	}
	out := make([]Parcel, len(rows))
	for i, r := range rows {
		p, err := r.parcel()
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}
