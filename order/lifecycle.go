package order

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

// CancelOrder closes a pending order at the buyer's or an operator's request
// (reason ReasonUserCancel or ReasonOperatorCancel) and releases its stock.
// Cancelling an order already closed returns it unchanged; cancelling a paid
// one is ErrIllegalTransition (refund it instead).
func (s *Service) CancelOrder(ctx context.Context, id int64, reason string) (Order, error) {
	ctx, call := s.obs.cancelOrder.Start(ctx)
	o, err := s.cancelOrder(ctx, id, reason)
	return o, call.End(err)
}

func (s *Service) cancelOrder(ctx context.Context, id int64, reason string) (Order, error) {
	if reason != ReasonUserCancel && reason != ReasonOperatorCancel {
		return Order{}, fmt.Errorf("%w: cancel reason %q", ErrInvalid, reason)
	}
	return s.close(ctx, id, reason)
}

// close moves a pending order to Closed with reason and then cancels its
// reservations. An order closed before is returned as it is (its stock is
// settled again, idempotently, in case the first close died half-way).
func (s *Service) close(ctx context.Context, id int64, reason string) (Order, error) {
	sh := s.shardOfID(id)
	var o Order
	err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		var err error
		if o, err = s.load(ctx, tx, sh, id, true); err != nil {
			return err
		}
		if o.Status == Closed {
			return nil
		}
		if o.Status != Pending {
			return illegal(id, o.Status, Closed)
		}
		o.CloseReason = reason
		return s.update(ctx, tx, &o, Closed, `, close_reason = ?`, reason)
	})
	if err != nil {
		return Order{}, err
	}
	return o, s.settleStock(ctx, &o)
}

// settleStock confirms a paid order's reservations or cancels a closed
// one's, then marks its stock settled. Every step is idempotent, so the
// sweeper may run it again after a crash.
func (s *Service) settleStock(ctx context.Context, o *Order) error {
	if o.stock == stockSettled || o.Status == Pending {
		return nil
	}
	for _, it := range o.Items {
		var err error
		if o.Status == Closed {
			err = s.settle(ctx, o.ID, it.SKU, barrierCancelled)
		} else {
			err = s.settle(ctx, o.ID, it.SKU, barrierConfirmed)
		}
		if err != nil {
			return fmt.Errorf("order: settle stock of %d: %w", o.ID, err)
		}
	}
	sh := s.shardOfID(o.ID)
	if _, err := sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET stock = ? WHERE id = ?`, stockSettled, o.ID); err != nil {
		return fmt.Errorf("order: mark stock of %d settled: %w", o.ID, err)
	}
	o.stock, o.Settled = stockSettled, true
	return nil
}

// Complete marks a shipped order received (the buyer confirmed, or
// AutoComplete passed). An order already completed is returned unchanged;
// any other status but shipped is ErrIllegalTransition.
func (s *Service) Complete(ctx context.Context, id int64) (Order, error) {
	ctx, call := s.obs.complete.Start(ctx)
	o, err := s.complete(ctx, id)
	return o, call.End(err)
}

func (s *Service) complete(ctx context.Context, id int64) (Order, error) {
	return s.step(ctx, id, Shipped, Completed, "")
}

// step applies from → to to order id; an order already in to is returned
// unchanged, so retries and redelivered events are harmless.
func (s *Service) step(ctx context.Context, id int64, from, to Status, set string, args ...any) (Order, error) {
	if id <= 0 {
		return Order{}, fmt.Errorf("%w: order id %d", ErrInvalid, id)
	}
	sh := s.shardOfID(id)
	var o Order
	err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		var err error
		if o, err = s.load(ctx, tx, sh, id, true); err != nil {
			return err
		}
		switch o.Status {
		case to:
			return nil
		case from:
			return s.update(ctx, tx, &o, to, set, args...)
		}
		return illegal(id, o.Status, to)
	})
	return o, err
}

// Delay queues: one Redis sorted set per order table and purpose, scored by
// the due time in ms. They make timeouts prompt; Sweep finds in SQL what they
// lost (a Redis failover, a crash between the commit and the ZADD).
const (
	queueClose    = "close"
	queueComplete = "complete"
)

var (
	//go:embed popdue.lua
	popDueLua    string
	popDueScript = redis.NewScript(popDueLua)
)

func (s *Service) queueKey(kind string, table int) string {
	return s.space.Key("delay:"+strconv.Itoa(table), kind)
}

// schedule adds id to a delay queue; a failure only leaves the timeout to
// Sweep.
func (s *Service) schedule(ctx context.Context, kind string, id int64, due time.Time) {
	s.rdb.ZAdd(ctx, s.queueKey(kind, s.shardOfID(id).Index), redis.Z{Score: float64(ms(due)), Member: id})
}

// RunDue closes the pending orders and completes the shipped ones whose
// time has come, as the delay queues say, at most batch per queue. It
// returns how many orders it moved. An order whose state changed meanwhile
// (paid before its deadline) is skipped.
func (s *Service) RunDue(ctx context.Context, batch int) (int, error) {
	ctx, call := s.obs.runDue.Start(ctx)
	n, err := s.runDue(ctx, batch)
	return n, call.End(err)
}

func (s *Service) runDue(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("%w: batch %d", ErrInvalid, batch)
	}
	moved := 0
	for _, sh := range s.orders.All() {
		for _, kind := range []string{queueClose, queueComplete} {
			ids, err := popDueScript.Run(ctx, s.rdb, []string{s.queueKey(kind, sh.Index)}, s.now(), batch).Int64Slice()
			if err != nil && !errors.Is(err, redis.Nil) {
				return moved, fmt.Errorf("order: pop due %s: %w", kind, err)
			}
			for _, id := range ids {
				ok, err := s.due(ctx, kind, id)
				if err != nil {
					s.rdb.ZAdd(ctx, s.queueKey(kind, sh.Index), redis.Z{Score: float64(s.now()), Member: id}) // try again
					s.log.Warn("order: due order not moved; queued again", "queue", kind, "order", id, "err", err)
					return moved, err
				}
				if ok {
					moved++
				}
			}
		}
	}
	return moved, nil
}

// Expire closes order id with ReasonTimeout if it is still pending past its
// deadline — what RunDue does when the order's time comes, for a caller that
// holds the order's id and must know now (a flash-sale gate settling a lapsed
// reservation) — and returns the order as it then is. A payment racing it is
// decided by the same conditional UPDATE: exactly one wins.
func (s *Service) Expire(ctx context.Context, id int64) (Order, error) {
	ctx, call := s.obs.expire.Start(ctx)
	o, err := s.expire(ctx, id)
	return o, call.End(err)
}

func (s *Service) expire(ctx context.Context, id int64) (Order, error) {
	if _, err := s.due(ctx, queueClose, id); err != nil {
		return Order{}, err
	}
	return s.get(ctx, id)
}

// due applies one due timeout if it still applies.
func (s *Service) due(ctx context.Context, kind string, id int64) (bool, error) {
	o, err := s.get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now := s.cfg.Now()
	switch {
	case kind == queueClose && o.Status == Pending && !now.Before(o.PayDeadline):
		_, err = s.close(ctx, id, ReasonTimeout)
	case kind == queueComplete && o.Status == Shipped && !now.Before(o.ShippedAt.Add(s.cfg.AutoComplete)):
		_, err = s.complete(ctx, id)
	default:
		return false, nil
	}
	if errors.Is(err, ErrIllegalTransition) || errors.Is(err, ErrConflict) {
		return false, nil // paid or moved on meanwhile
	}
	return err == nil, err
}

// SweepReport counts what a Sweep did.
type SweepReport struct {
	Closed    int // pending orders past their deadline, closed
	Completed int // shipped orders past AutoComplete, completed
	Settled   int // orders whose stock was confirmed or cancelled late
	Restocked int // line refunds whose units were put back in stock late
}

// Sweep is the backstop of the delay queues and of crashes: on every order
// table it closes pending orders past their deadline, completes shipped ones
// past AutoComplete, and settles the stock of paid or closed orders a crash
// left unsettled, and returns to stock the units of line refunds a crash
// left unreturned — at most batch of each per table. Run it every minute or
// so; it is idempotent and safe beside RunDue and other sweepers.
func (s *Service) Sweep(ctx context.Context, batch int) (SweepReport, error) {
	ctx, call := s.obs.sweep.Start(ctx)
	rep, err := s.sweep(ctx, batch)
	return rep, call.End(err)
}

func (s *Service) sweep(ctx context.Context, batch int) (SweepReport, error) {
	var rep SweepReport
	var restockErrs []error
	if batch < 1 {
		return rep, fmt.Errorf("%w: batch %d", ErrInvalid, batch)
	}
	now := s.now()
	for _, sh := range s.orders.All() {
		var late, done, unsettled []int64
		if err := sh.DB.SelectContext(ctx, &late, `SELECT id FROM `+sh.Table+` WHERE status = ? AND pay_deadline <= ? LIMIT ?`, string(Pending), now, batch); err != nil {
			return rep, fmt.Errorf("order: sweep %s: %w", sh.Table, err)
		}
		if err := sh.DB.SelectContext(ctx, &done, `SELECT id FROM `+sh.Table+` WHERE status = ? AND shipped_at <= ? LIMIT ?`, string(Shipped), now-s.cfg.AutoComplete.Milliseconds(), batch); err != nil {
			return rep, fmt.Errorf("order: sweep %s: %w", sh.Table, err)
		}
		if err := sh.DB.SelectContext(ctx, &unsettled, `SELECT id FROM `+sh.Table+` WHERE stock <> ? AND status <> ? LIMIT ?`, stockSettled, string(Pending), batch); err != nil {
			return rep, fmt.Errorf("order: sweep %s: %w", sh.Table, err)
		}
		for _, id := range late {
			if ok, err := s.due(ctx, queueClose, id); err != nil {
				return rep, err
			} else if ok {
				rep.Closed++
			}
		}
		for _, id := range done {
			if ok, err := s.due(ctx, queueComplete, id); err != nil {
				return rep, err
			} else if ok {
				rep.Completed++
			}
		}
		for _, id := range unsettled {
			o, err := s.get(ctx, id)
			if err != nil {
				return rep, err
			}
			if err := s.settleStock(ctx, &o); err != nil {
				return rep, err
			}
			rep.Settled++
		}
		n, err := s.restockDue(ctx, sh, batch)
		rep.Restocked += n
		if err != nil { // the other shards still get their sweep
			restockErrs = append(restockErrs, err)
		}
	}
	return rep, errors.Join(restockErrs...)
}
