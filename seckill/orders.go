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
	ctx, call := s.obs.handle.Start(ctx)
	return call.End(s.handleOrder(ctx, value))
}

func (s *Service) handleOrder(ctx context.Context, value []byte) error {
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
		if id, _ := splitID(o.ID); id.bucket >= sl.c.Buckets {
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

// resID is a reservation id, "<campaign>-<bucket>-<batch>" for slot 0 of a
// batch and "<campaign>-<bucket>-<batch>.<slot>" for the others: the
// reservation made for the buyer in that slot of that batch (a call of
// buy.lua or take.lua, numbered by Config.IDs) on that bucket.
type resID struct {
	campaign string
	bucket   int
	batch    int64
	slot     int
}

// id is the reservation id of slot of batch n on bucket b.
func (sl *Sale) id(b int, n int64, slot int) string {
	return resID{sl.c.ID, b, n, slot}.String()
}

func (r resID) String() string {
	id := r.campaign + "-" + strconv.Itoa(r.bucket) + "-" + strconv.FormatInt(r.batch, 10)
	if r.slot > 0 {
		id += "." + strconv.Itoa(r.slot)
	}
	return id
}

// splitID parses a reservation id. Each reservation has one id: numbers are
// written without sign or leading zeros, and slot 0 without its suffix.
func splitID(id string) (resID, error) {
	bad := fmt.Errorf("%w: reservation id %q", ErrInvalid, id)
	j := strings.LastIndexByte(id, '-')
	i := -1
	if j > 0 {
		i = strings.LastIndexByte(id[:j], '-')
	}
	if i <= 0 || !idPattern.MatchString(id[:i]) {
		return resID{}, bad
	}
	r := resID{campaign: id[:i], slot: 0}
	batch, slot, dotted := strings.Cut(id[j+1:], ".")
	var err1, err2, err3 error
	r.bucket, err1 = strconv.Atoi(id[i+1 : j])
	r.batch, err2 = strconv.ParseInt(batch, 10, 64)
	if dotted {
		r.slot, err3 = strconv.Atoi(slot)
	}
	if err1 != nil || err2 != nil || err3 != nil || r.bucket < 0 || r.batch < 1 || dotted && r.slot < 1 || r.String() != id {
		return resID{}, bad
	}
	return r, nil
}

// reservation finds the campaign of a reservation id.
func (s *Service) reservation(ctx context.Context, id string) (*Sale, resID, error) {
	r, err := splitID(id)
	if err != nil {
		return nil, resID{}, err
	}
	sl, err := s.Open(ctx, r.campaign)
	if err != nil {
		return nil, resID{}, err
	}
	if r.bucket >= sl.c.Buckets {
		return nil, resID{}, fmt.Errorf("%w: reservation id %q", ErrInvalid, id)
	}
	return sl, r, nil
}

// A batch's record, the value of its field in the bucket's reservations
// hash, is "<home>" then ";<slot>=<user>,<qty>" for each of its open
// reservations (buy.lua writes it, or slices of it, as allReserved builds
// it; close.lua removes slots).
type slotRecord struct {
	slot int
	user string
	qty  int64
}

// parseRecord parses a batch's record.
func parseRecord(v string) (home int, slots []slotRecord, err error) {
	parts := strings.Split(v, ";")
	home, err = strconv.Atoi(parts[0])
	if err != nil || home < 0 {
		return 0, nil, fmt.Errorf("seckill: malformed reservation record %q", v)
	}
	slots = make([]slotRecord, 0, len(parts)-1)
	for _, p := range parts[1:] {
		slot, rest, ok1 := strings.Cut(p, "=")
		user, qty, ok2 := strings.Cut(rest, ",")
		r := slotRecord{user: user}
		var err1, err2 error
		r.slot, err1 = strconv.Atoi(slot)
		r.qty, err2 = strconv.ParseInt(qty, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || user == "" || r.qty < 1 {
			return 0, nil, fmt.Errorf("seckill: malformed reservation record %q", v)
		}
		slots = append(slots, r)
	}
	return home, slots, nil
}

// formatRecord is the record of a batch's open slots.
func formatRecord(home int, slots []slotRecord) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(home))
	for _, r := range slots {
		fmt.Fprintf(&b, ";%d=%s,%d", r.slot, r.user, r.qty)
	}
	return b.String()
}

// reservationValue is one reservation as "user|qty|home" (close.lua's answer).
func reservationValue(user string, qty int64, home int) string {
	return user + "|" + strconv.FormatInt(qty, 10) + "|" + strconv.Itoa(home)
}

// batchReservations reads batch n of bucket b and returns its open
// reservations by id, as "user|qty|home"; none when the batch is closed.
func (sl *Sale) batchReservations(ctx context.Context, b int, n int64) (map[string]string, error) {
	v, err := sl.s.rdb.HGet(ctx, sl.key(b, "res"), strconv.FormatInt(n, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("seckill: read reservations of %s: %w", sl.id(b, n, 0), err)
	}
	return sl.expand(b, n, v)
}

// expand turns batch n's record on bucket b into its reservations by id.
func (sl *Sale) expand(b int, n int64, v string) (map[string]string, error) {
	home, slots, err := parseRecord(v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(slots))
	for _, r := range slots {
		out[sl.id(b, n, r.slot)] = reservationValue(r.user, r.qty, home)
	}
	return out, nil
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
		for _, batch := range due {
			if err := ctx.Err(); err != nil {
				return released, errors.Join(append(errs, err)...)
			}
			n, err := sl.releaseBatch(ctx, b, batch)
			released += n
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return released, errors.Join(errs...)
}

// releaseBatch settles the open reservations of a due batch and returns how
// many it returned to the stock.
func (sl *Sale) releaseBatch(ctx context.Context, b int, batch string) (int, error) {
	n, err := strconv.ParseInt(batch, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("seckill: due of %s/%d: malformed batch %q", sl.c.ID, b, batch)
	}
	open, err := sl.batchReservations(ctx, b, n)
	if err != nil {
		return 0, err
	}
	if len(open) == 0 {
		_, err := sl.close(ctx, b, sl.id(b, n, 0), false) // closed before: clear a stray deadline
		return 0, err
	}
	released := 0
	var errs []error
	for id, r := range open {
		restocked, err := sl.settle(ctx, b, id, r, nil)
		if restocked {
			released++
		}
		if err != nil && !errors.Is(err, errNotSettled) { // not settled: next pass
			errs = append(errs, err)
		}
	}
	return released, errors.Join(errs...)
}

// settle closes reservation id (r "user|qty|home" as read from Redis, or ""
// to read it here) of bucket b as its order says (see ReleaseDue), reading
// the order unless o is given, and reports whether this call returned its
// units to the stock.
func (sl *Sale) settle(ctx context.Context, b int, id, r string, o *order.Order) (bool, error) {
	rid, err := splitID(id)
	if err != nil {
		return false, err
	}
	if r == "" {
		open, err := sl.batchReservations(ctx, b, rid.batch)
		if err != nil { // unknown: leave it for the next pass
			return false, err
		}
		if r = open[id]; r == "" {
			_, err := sl.close(ctx, b, id, false) // closed before: clear a stray deadline
			return false, err
		}
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
			payBy, err := sl.s.rdb.ZScore(ctx, sl.key(b, "due"), strconv.FormatInt(rid.batch, 10)).Result()
			if errors.Is(err, redis.Nil) {
				// The batch's deadline goes with its last open slot: a
				// concurrent pass (or the order's event) closed r after it
				// was read here, and settled its order as it did.
				open, err := sl.batchReservations(ctx, b, rid.batch)
				if err != nil {
					return false, err
				}
				if open[id] == "" {
					return false, nil
				}
				return false, fmt.Errorf("seckill: reservation %s is open without a deadline", id)
			}
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
	sl, rid, err := s.reservation(ctx, o.RequestID)
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNoCampaign) {
		return nil // not a flash-sale order
	}
	if err != nil {
		return err
	}
	if len(o.Items) != 1 || o.Items[0].SKU != sl.c.SKU {
		return nil
	}
	_, err = sl.settle(ctx, rid.bucket, o.RequestID, "", &o)
	if errors.Is(err, ErrIDConflict) {
		return outbox.Poison(err)
	}
	return err // errNotSettled included: the redelivery finds it settled
}

// errNotSettled: an order closed, but its stock is not released in SQL yet.
var errNotSettled = errors.New("seckill: order stock not settled yet")
