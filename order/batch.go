package order

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// Result is one order of a CreateBatch: the order, or why it was not made
// (ErrOutOfStock: it was made and closed).
type Result struct {
	Order Order
	Err   error
}

// CreateBatch creates many orders as Create does, with the same guarantees
// per order (idempotent by user and request id; all of an order's lines
// reserved or none), but with one transaction per database per step instead
// of several per order: the pending orders, then the reservations of every
// inventory database, then the reserved marks. A commit costs a disk flush,
// so a batch of hundreds costs about what one order does. Results are in
// the order of reqs.
func (s *Service) CreateBatch(ctx context.Context, reqs []NewOrder) []Result {
	res := make([]Result, len(reqs))
	var todo []int
	for i, n := range reqs {
		if res[i].Err = n.validate(); res[i].Err == nil {
			todo = append(todo, i)
		}
	}
	prices, err := s.prices(ctx, reqs, todo)
	if err != nil {
		return fail(res, todo, err)
	}
	orders := map[int]*Order{}
	for _, i := range todo {
		o, err := s.draft(ctx, reqs[i], prices)
		if err != nil {
			res[i].Err = err
			continue
		}
		orders[i] = o
	}
	s.insertBatch(ctx, reqs, orders, res)
	s.reserveBatch(ctx, orders, res)
	var due []*Order
	for i, o := range orders {
		res[i].Order = *o
		switch {
		case o.Status == Closed && o.CloseReason == ReasonOutOfStock:
			// Also the answer to a repeat of a request whose order sold out,
			// or that lost its race with the close of a concurrent twin.
			res[i].Err = fmt.Errorf("%w: order %d closed", ErrOutOfStock, o.ID)
		case res[i].Err == nil && o.Status == Pending:
			due = append(due, o)
		}
	}
	pipe := s.rdb.Pipeline()
	for _, o := range due {
		pipe.ZAdd(ctx, s.queueKey(queueClose, s.shardOfID(o.ID).Index), redis.Z{Score: float64(ms(o.PayDeadline)), Member: o.ID})
	}
	pipe.Exec(ctx) // a lost ZADD leaves the timeout to Sweep
	return res
}

func fail(res []Result, todo []int, err error) []Result {
	for _, i := range todo {
		res[i].Err = err
	}
	return res
}

// prices reads the unit price of every SKU the batch names, one query per
// inventory table.
func (s *Service) prices(ctx context.Context, reqs []NewOrder, todo []int) (map[string]int64, error) {
	byShard := map[int][]string{}
	seen := map[string]bool{}
	for _, i := range todo {
		for _, l := range reqs[i].Lines {
			if !seen[l.SKU] {
				seen[l.SKU] = true
				sh := s.inventory.ByKey(l.SKU)
				byShard[sh.Index] = append(byShard[sh.Index], l.SKU)
			}
		}
	}
	prices := map[string]int64{}
	all := s.inventory.All()
	for idx, skus := range byShard {
		sh := all[idx]
		q, args, err := sqlx.In(`SELECT sku, price FROM `+sh.Table+` WHERE sku IN (?)`, skus)
		if err != nil {
			return nil, err
		}
		var rows []struct {
			SKU   string `db:"sku"`
			Price int64  `db:"price"`
		}
		if err := sh.DB.SelectContext(ctx, &rows, q, args...); err != nil {
			return nil, fmt.Errorf("order: prices: %w", err)
		}
		for _, r := range rows {
			prices[r.SKU] = r.Price
		}
	}
	return prices, nil
}

// draft builds a new pending order for n at prices, with a fresh number.
func (s *Service) draft(ctx context.Context, n NewOrder, prices map[string]int64) (*Order, error) {
	items := make([]Item, len(n.Lines))
	var amount int64
	for i, l := range n.Lines {
		price, ok := prices[l.SKU]
		if !ok {
			return nil, fmt.Errorf("%w: sku %s", ErrNotFound, l.SKU)
		}
		items[i] = Item{SKU: l.SKU, Qty: l.Qty, Price: price}
		if amount += price * l.Qty; amount > maxMoney {
			return nil, fmt.Errorf("%w: order total above %d", ErrInvalid, int64(maxMoney))
		}
	}
	slices.SortFunc(items, func(a, b Item) int { return cmp.Compare(a.SKU, b.SKU) })
	id, err := s.newID(ctx, n.User)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	return &Order{
		ID: id, User: n.User, RequestID: n.RequestID, Status: Pending, Version: 1, Amount: amount, Currency: s.cfg.Currency,
		Items: items, CreatedAt: instant(ms(now)), PayDeadline: instant(ms(now.Add(s.cfg.PayTimeout))), UpdatedAt: instant(ms(now)),
	}, nil
}

// insertBatch writes the drafts, one transaction per database. A draft
// whose request was made before is replaced by the existing order.
func (s *Service) insertBatch(ctx context.Context, reqs []NewOrder, orders map[int]*Order, res []Result) {
	byDB := map[int][]int{}
	for i, o := range orders {
		byDB[s.shardOfID(o.ID).DBIndex] = append(byDB[s.shardOfID(o.ID).DBIndex], i)
	}
	for dbi, idx := range byDB {
		var dups []int
		err := inTx(ctx, s.dbs[dbi], func(tx *sqlx.Tx) error {
			dups = dups[:0]
			for _, i := range idx {
				o := orders[i]
				sh := s.shardOfID(o.ID)
				items, _ := json.Marshal(o.Items)
				_, err := tx.ExecContext(ctx, `INSERT INTO `+sh.Table+` (`+orderColumns+`)
					VALUES (?, ?, ?, ?, 1, ?, ?, ?, 0, '', 0, 0, ?, ?, 0, 0, ?)`,
					o.ID, o.User, o.RequestID, string(Pending), o.Amount, o.Currency, string(items),
					ms(o.CreatedAt), ms(o.PayDeadline), ms(o.CreatedAt))
				if sqlutil.IsDuplicate(err) { // only this statement failed; the transaction goes on
					dups = append(dups, i)
					continue
				}
				if err != nil {
					return err
				}
				if err := s.emit(ctx, tx, sh, Event{Kind: EventCreated, OrderID: o.ID, User: o.User, To: Pending, Version: 1, Amount: o.Amount, At: ms(o.CreatedAt)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			for _, i := range idx {
				res[i].Err = fmt.Errorf("order: create: %w", err)
				delete(orders, i)
			}
			continue
		}
		for _, i := range dups {
			existing, err := s.byRequest(ctx, s.dbs[dbi], reqs[i].User, reqs[i].RequestID)
			if err != nil {
				res[i].Err = err
				delete(orders, i)
				continue
			}
			*orders[i] = existing
		}
	}
}

// reserveBatch reserves the lines of every order not yet reserved, one
// transaction per inventory database, then marks the fully reserved orders,
// one transaction per order database; an order with a short line is
// closed, which cancels the lines it did get.
func (s *Service) reserveBatch(ctx context.Context, orders map[int]*Order, res []Result) {
	type line struct {
		i   int
		sku string
		qty int64
	}
	byDB := map[int][]line{}
	for i, o := range orders {
		if o.Status != Pending || o.stock != stockNone {
			continue
		}
		for _, it := range o.Items {
			dbi := s.inventory.ByKey(it.SKU).DBIndex
			byDB[dbi] = append(byDB[dbi], line{i, it.SKU, it.Qty})
		}
	}
	short := map[int]error{}
	for _, lines := range byDB {
		// One order of SKUs in every transaction: two batches never wait on
		// each other's rows in opposite orders.
		slices.SortFunc(lines, func(a, b line) int {
			return cmp.Or(cmp.Compare(a.sku, b.sku), cmp.Compare(orders[a.i].ID, orders[b.i].ID))
		})
		db := s.inventory.ByKey(lines[0].sku).DB
		var failed map[int]error
		err := inTx(ctx, db, func(tx *sqlx.Tx) error {
			failed = map[int]error{}
			for _, l := range lines {
				if _, gone := failed[l.i]; gone {
					continue
				}
				err := s.tryIn(ctx, tx, orders[l.i].ID, l.sku, l.qty)
				if errors.Is(err, ErrOutOfStock) || errors.Is(err, ErrHanging) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
					failed[l.i] = err
					continue
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			for _, l := range lines {
				failed[l.i] = err
			}
		}
		for i, err := range failed {
			short[i] = err
		}
	}
	byOrderDB := map[int][]int{}
	for i, o := range orders {
		if _, bad := short[i]; !bad && o.Status == Pending && o.stock == stockNone {
			byOrderDB[s.shardOfID(o.ID).DBIndex] = append(byOrderDB[s.shardOfID(o.ID).DBIndex], i)
		}
	}
	for dbi, idx := range byOrderDB {
		err := inTx(ctx, s.dbs[dbi], func(tx *sqlx.Tx) error {
			for _, i := range idx {
				sh := s.shardOfID(orders[i].ID)
				if _, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET stock = ? WHERE id = ? AND status = ? AND stock = ?`,
					stockReserved, orders[i].ID, string(Pending), stockNone); err != nil {
					return err
				}
			}
			return nil
		})
		for _, i := range idx {
			if err != nil {
				res[i].Err = fmt.Errorf("order: mark reserved: %w", err) // a repeat of the request finishes it
				continue
			}
			orders[i].stock, orders[i].Reserved = stockReserved, true
		}
	}
	for i, cause := range short {
		if !errors.Is(cause, ErrOutOfStock) && !errors.Is(cause, ErrHanging) && !errors.Is(cause, ErrNotFound) {
			res[i].Err = cause // infrastructure: a repeat of the request finishes it
			continue
		}
		closed, err := s.close(ctx, orders[i].ID, ReasonOutOfStock)
		if err != nil {
			res[i].Err = errors.Join(cause, err)
			continue
		}
		*orders[i] = closed
		res[i].Err = cause
	}
}

// tryIn is Reserve inside a caller's transaction; a short line leaves no
// trace (its barrier row is removed again).
func (s *Service) tryIn(ctx context.Context, tx *sqlx.Tx, order int64, sku string, qty int64) error {
	sh := s.inventory.ByKey(sku)
	barrier := sibling(sh, "inventory_tx")
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
