package seckill

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
)

// HandleOrder is the Kafka consumer of order messages (see OrderMessage): it
// creates the message's orders through the order block (order.CreateBatch),
// each keyed by (buyer, reservation id) and due at the reservation's
// deadline. The order block makes the final deduction in SQL, guarded by
// available >= qty, so SQL never records more units sold than the SKU has,
// even if Redis lost its state and sold too many: those orders are closed
// out of stock (ReasonOutOfStock, the old "rejected"), and their
// reservations close without restocking Redis. A redelivered message finds
// its orders and changes nothing; a reservation id recorded for the same
// buyer with another SKU or quantity is ErrIDConflict. A malformed message,
// or one for a campaign SQL does not know, is ErrBadMessage. Both are
// outbox.ErrPoison; any other error is transient.
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
	reqs := make([]order.NewOrder, len(m.Orders))
	for i, o := range m.Orders {
		if _, b, _, _ := splitID(o.ID); b >= sl.c.Buckets {
			return outbox.Poison(fmt.Errorf("%w: order %s: campaign %s has %d buckets", ErrBadMessage, o.ID, sl.c.ID, sl.c.Buckets))
		}
		reqs[i] = sl.newOrder(o)
	}
	var errs []error
	for i, r := range s.orders.CreateBatch(ctx, reqs) {
		switch {
		case r.Err == nil, errors.Is(r.Err, order.ErrOutOfStock):
			if err := sameOrder(r.Order, reqs[i]); err != nil {
				return outbox.Poison(err)
			}
		case errors.Is(r.Err, order.ErrInvalid):
			return outbox.Poison(fmt.Errorf("%w: order %s: %w", ErrBadMessage, m.Orders[i].ID, r.Err))
		default:
			errs = append(errs, fmt.Errorf("seckill: create order %s: %w", m.Orders[i].ID, r.Err))
		}
	}
	return errors.Join(errs...) // transient: the redelivery creates the rest, and repeats nothing
}

// newOrder is the order request for reservation o.
func (sl *Sale) newOrder(o Order) order.NewOrder {
	return order.NewOrder{User: o.User, RequestID: o.ID, Lines: []order.Line{{SKU: sl.c.SKU, Qty: o.Qty}}, PayBy: o.PayBy}
}

// sameOrder checks that the order found for a request is the one asked for,
// so that only a redelivery is taken for one.
func sameOrder(o order.Order, want order.NewOrder) error {
	if len(o.Items) != 1 || o.Items[0].SKU != want.Lines[0].SKU || o.Items[0].Qty != want.Lines[0].Qty {
		return fmt.Errorf("%w: %s of %s is order %d of %v, the message says %d × %s",
			ErrIDConflict, want.RequestID, want.User, o.ID, o.Items, want.Lines[0].Qty, want.Lines[0].SKU)
	}
	return nil
}

// OrderOf returns the order made of reservation id for user: what the buyer
// pays (order.Service.StartPayment) and follows. It is ErrNotReady until the
// consumer has created it and reserved its stock in SQL.
func (s *Service) OrderOf(ctx context.Context, user, id string) (order.Order, error) {
	sl, _, err := s.reservation(ctx, id)
	if err != nil {
		return order.Order{}, err
	}
	o, err := s.orders.ByRequest(ctx, user, id)
	switch {
	case errors.Is(err, order.ErrNotFound) || err == nil && o.Status == order.Pending && !o.Reserved:
		return order.Order{}, fmt.Errorf("%w: %s", ErrNotReady, id)
	case err == nil && (len(o.Items) != 1 || o.Items[0].SKU != sl.c.SKU):
		return order.Order{}, fmt.Errorf("%w: order %d under %s is not the campaign's", ErrIDConflict, o.ID, id)
	}
	return o, err
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

// ReleaseDue settles the reservations whose payment deadline passed, as
// their orders say, and returns how many this pass returned to the stock
// (concurrent passes never count one twice). The order block decides: its
// timeout closes an unpaid order at the reservation's deadline (here, through
// order.Service.Expire, or by order's own RunDue and Sweep), racing the
// payment callback's conditional UPDATE, and exactly one wins. Then:
//
//   - closed (timed out or cancelled): the units go back to Redis with the
//     buyer's quota, once;
//   - closed out of stock (Redis sold a unit SQL did not have): the
//     reservation closes and nothing is restocked;
//   - paid: the reservation closes, the quota stays used;
//   - closed, but its stock not released in SQL yet: left due.
//
// A reservation whose order the consumer has not created yet is created here
// (order.Service.Create is idempotent by buyer and reservation id, so the
// late message changes nothing) and then times out as any other. A
// reservation that meets an error stays due for the next pass; the others
// are still settled. Run it every few seconds; orders closed or paid before
// their deadline are settled at once by HandleOrderEvent.
func (sl *Sale) ReleaseDue(ctx context.Context) (int, error) {
	now := strconv.FormatInt(sl.s.cfg.Now().UnixMilli(), 10)
	released := 0
	var errs []error
	for b := range sl.c.Buckets {
		due, err := sl.s.rdb.ZRangeByScore(ctx, sl.key(b, "due"), &redis.ZRangeBy{Min: "-inf", Max: now}).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("seckill: due of %s/%d: %w", sl.c.ID, b, err))
			continue
		}
		for _, id := range due {
			if err := ctx.Err(); err != nil {
				return released, errors.Join(append(errs, err)...)
			}
			restocked, err := sl.settle(ctx, b, id, nil)
			if restocked {
				released++
			}
			if err != nil && !errors.Is(err, errNotSettled) { // not settled: next pass
				errs = append(errs, err)
			}
		}
	}
	return released, errors.Join(errs...)
}

// settle closes reservation id of bucket b as its order says (see
// ReleaseDue), reading the order unless o is given, and reports whether this
// call returned its units to the stock.
func (sl *Sale) settle(ctx context.Context, b int, id string, o *order.Order) (bool, error) {
	r, err := sl.s.rdb.HGet(ctx, sl.key(b, "res"), id).Result()
	if errors.Is(err, redis.Nil) {
		_, err := sl.close(ctx, b, id, false) // closed before: clear a stray deadline
		return false, err
	}
	if err != nil { // unknown: leave it for the next pass
		return false, fmt.Errorf("seckill: read reservation %s: %w", id, err)
	}
	user, qty, _, err := parseReservation(r)
	if err != nil {
		return false, err
	}
	if o != nil && o.User != user {
		return false, fmt.Errorf("%w: order %d is %s's, reservation %s is %s's", ErrIDConflict, o.ID, o.User, id, user)
	}
	lapsed := o == nil // ReleaseDue's call: the reservation's deadline passed
	if o == nil {
		got, err := sl.s.orders.ByRequest(ctx, user, id)
		if errors.Is(err, order.ErrNotFound) {
			// Its message is still on its way: create the order now, due
			// when the reservation was, for the order timeout to close.
			payBy, err := sl.s.rdb.ZScore(ctx, sl.key(b, "due"), id).Result()
			if err != nil {
				return false, fmt.Errorf("seckill: deadline of %s: %w", id, err)
			}
			got, err = sl.s.orders.Create(ctx, sl.newOrder(Order{ID: id, User: user, Qty: qty, PayBy: time.UnixMilli(int64(payBy))}))
			if err != nil && !errors.Is(err, order.ErrOutOfStock) {
				return false, fmt.Errorf("seckill: record order of %s: %w", id, err)
			}
		} else if err != nil {
			return false, fmt.Errorf("seckill: order of %s: %w", id, err)
		}
		o = &got
	}
	if len(o.Items) != 1 || o.Items[0].SKU != sl.c.SKU || o.Items[0].Qty != qty {
		// Another order holds the reservation's id (its buyer's own, made
		// with that request id): the reservation's order can never be
		// recorded (HandleOrder reports ErrIDConflict), so nobody can pay
		// it, and at its deadline its units and quota go back.
		if !lapsed {
			return false, nil
		}
		return sl.close(ctx, b, id, true)
	}
	if o.Status == order.Pending && !sl.s.cfg.Now().Before(o.PayDeadline) {
		got, err := sl.s.orders.Expire(ctx, o.ID) // or it is paid, as the database decides
		if err != nil {
			return false, fmt.Errorf("seckill: expire order of %s: %w", id, err)
		}
		o = &got
	}
	switch o.Status {
	case order.Pending:
		return false, nil // not due yet (its deadline is the reservation's)
	case order.Closed:
		if o.CloseReason == order.ReasonOutOfStock {
			return sl.close(ctx, b, id, false)
		}
		if !o.Settled {
			// Its units are back in SQL only once the order block released
			// them (right after the close, or at its Sweep after a crash):
			// restocking Redis first would sell a unit whose order SQL
			// then finds out of stock.
			return false, fmt.Errorf("%w: order %d of %s closed, its stock not released yet", errNotSettled, o.ID, id)
		}
		return sl.close(ctx, b, id, true)
	default: // paid, and the states after it: the units are sold
		return sl.close(ctx, b, id, false)
	}
}

// HandleOrderEvent is the consumer of the order block's events
// (order.Service.RelayOutbox's topic): when an order made by a campaign is
// paid or closed, it settles the order's reservation at once, as ReleaseDue
// does at the deadline — a cancelled order's units go back on sale without
// waiting for its deadline. Events of other orders are ignored; a malformed
// event is order.ErrBadEvent (poison). Redeliveries change nothing. A closed
// order whose stock the order block has not released yet (the moment after
// the close, or until its Sweep after a crash) is a transient error: the
// consumer tries it again.
func (s *Service) HandleOrderEvent(ctx context.Context, _, value []byte) error {
	e, err := order.DecodeEvent(value)
	if err != nil {
		return outbox.Poison(err)
	}
	if e.Kind != order.EventStatus || (e.To != order.Closed && e.To != order.Paid) {
		return nil
	}
	o, err := s.orders.Get(ctx, e.OrderID)
	if errors.Is(err, order.ErrNotFound) {
		return nil // not ours (another service's databases), or never committed
	}
	if err != nil {
		return err
	}
	sl, b, err := s.reservation(ctx, o.RequestID)
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNoCampaign) {
		return nil // not a flash-sale order
	}
	if err != nil {
		return err
	}
	if len(o.Items) != 1 || o.Items[0].SKU != sl.c.SKU {
		return nil
	}
	_, err = sl.settle(ctx, b, o.RequestID, &o)
	if errors.Is(err, ErrIDConflict) {
		return outbox.Poison(err)
	}
	return err // errNotSettled included: the redelivery finds it settled
}

// errNotSettled: an order closed, but its stock is not released in SQL yet.
var errNotSettled = errors.New("seckill: order stock not settled yet")
