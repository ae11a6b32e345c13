package order

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Result is one order of a CreateBatch: the order, or why it was not made
// (ErrOutOfStock: it was made and closed).
type Result struct {
	Order Order
	Err   error
}

// batchOrder is one request of a batch on its way.
type batchOrder struct {
	req   NewOrder
	o     *Order // nil when the request failed before reaching SQL
	fresh bool   // inserted by this batch (not a repeat of an earlier request)
	dup   bool   // repeats an earlier request of this batch, whose o it shares
	err   error
}

// CreateBatch creates many orders as Create does, with the same guarantees
// per order (idempotent by user and request id; all of an order's lines
// reserved or none), but with one transaction per database per step
// instead of several per order, the databases in parallel: the pending
// orders and their events (one multi-row INSERT per table), then the
// reservations of every inventory database (one UPDATE per SKU when its
// stock covers the whole batch's demand), then the reserved marks (one
// UPDATE per table). A commit costs a disk flush and a statement a round
// trip, so a batch of hundreds costs about what a few orders do. Results
// are in the order of reqs.
func (s *Service) CreateBatch(ctx context.Context, reqs []NewOrder) []Result {
	ctx, call := s.obs.createBatch.Start(ctx)
	res := s.createBatch(ctx, reqs)
	call.End(worst(res))
	return res
}

// worst is the error a batch is counted by: the first that is not a
// refusal, else the first refusal, else nil.
func worst(res []Result) error {
	var first error
	for _, r := range res {
		if r.Err == nil {
			continue
		}
		if outcome, _ := classify(r.Err); outcome == obs.Error {
			return r.Err
		}
		if first == nil {
			first = r.Err
		}
	}
	return first
}

func (s *Service) createBatch(ctx context.Context, reqs []NewOrder) []Result {
	b := make([]*batchOrder, len(reqs))
	var todo []int
	for i, n := range reqs {
		b[i] = &batchOrder{req: n, err: n.validate()}
		if b[i].err == nil {
			todo = append(todo, i)
		}
	}
	prices, err := s.prices(ctx, reqs, todo)
	for _, i := range todo {
		if b[i].err = err; err == nil {
			b[i].o, b[i].err = s.draft(ctx, reqs[i], prices)
		}
	}
	s.insertBatch(ctx, b)
	shareRepeats(b)
	s.reserveBatch(ctx, b)
	res := make([]Result, len(b))
	pipe := s.rdb.Pipeline()
	for i, bo := range b {
		res[i].Err = bo.err
		if bo.o == nil {
			continue
		}
		o := bo.o
		res[i].Order = *o
		switch {
		case o.Status == Closed && o.CloseReason == ReasonOutOfStock:
			// Also the answer to a repeat of a request whose order sold out,
			// or that lost its race with the close of a concurrent twin.
			res[i].Err = fmt.Errorf("%w: order %d closed", ErrOutOfStock, o.ID)
		case bo.err == nil && o.Status == Pending:
			pipe.ZAdd(ctx, s.queueKey(queueClose, s.shardOfID(o.ID).Index), redis.Z{Score: float64(ms(o.PayDeadline)), Member: o.ID})
		}
	}
	pipe.Exec(ctx) // a lost ZADD leaves the timeout to Sweep
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
	payBy := n.PayBy
	if payBy.IsZero() {
		payBy = now.Add(s.cfg.PayTimeout)
	}
	return &Order{
		ID: id, User: n.User, RequestID: n.RequestID, Status: Pending, Version: 1, Amount: amount, Currency: s.cfg.Currency,
		Items: items, CreatedAt: instant(ms(now)), PayDeadline: instant(ms(payBy)), UpdatedAt: instant(ms(now)),
	}, nil
}

// perDB runs fn on each group of the batch's orders, the groups' databases
// in parallel; group says which database an order goes to (-1: none).
func perDB(ctx context.Context, b []*batchOrder, group func(*batchOrder) int, fn func(ctx context.Context, dbi int, members []*batchOrder)) {
	groups := map[int][]*batchOrder{}
	for _, bo := range b {
		if dbi := group(bo); dbi >= 0 {
			groups[dbi] = append(groups[dbi], bo)
		}
	}
	var g errgroup.Group
	for dbi, members := range groups {
		g.Go(func() error { fn(ctx, dbi, members); return nil })
	}
	g.Wait()
}

// insertBatch writes the drafts and their "created" events, one
// transaction per database: a multi-row INSERT that skips rows whose
// (user, request) exists, then one read of which drafts landed; a draft
// that did not is a repeat and is replaced by the existing order.
func (s *Service) insertBatch(ctx context.Context, b []*batchOrder) {
	perDB(ctx, b, func(bo *batchOrder) int {
		if bo.err != nil {
			return -1
		}
		return s.shardOfID(bo.o.ID).DBIndex
	}, func(ctx context.Context, dbi int, members []*batchOrder) {
		byTable := map[shard.Shard][]*batchOrder{}
		for _, bo := range members {
			sh := s.shardOfID(bo.o.ID)
			byTable[sh] = append(byTable[sh], bo)
		}
		landed := map[int64]bool{}
		err := inTx(ctx, s.dbs[dbi], func(tx *sqlx.Tx) error {
			clear(landed)
			for sh, rows := range byTable {
				if err := s.insertOrders(ctx, tx, sh, rows, landed); err != nil {
					return err
				}
			}
			var events []Event
			for _, bo := range members {
				if o := bo.o; landed[o.ID] {
					events = append(events, Event{Kind: EventCreated, OrderID: o.ID, User: o.User, To: Pending, Version: 1, Amount: o.Amount, At: ms(o.CreatedAt)})
				}
			}
			return s.emitAll(ctx, tx, events)
		})
		for _, bo := range members {
			switch {
			case err != nil:
				bo.o, bo.err = nil, fmt.Errorf("order: create: %w", err)
			case landed[bo.o.ID]:
				bo.fresh = true
			default:
				existing, err := s.byRequest(ctx, s.dbs[dbi], bo.req.User, bo.req.RequestID)
				bo.o, bo.err = &existing, err
				if err != nil {
					bo.o = nil
				}
			}
		}
	})
}

// shareRepeats points every request of the batch that resolved to the same
// order at one Order, so the order is reserved once and all of them report
// it.
func shareRepeats(b []*batchOrder) {
	first := map[int64]*batchOrder{}
	for _, bo := range b {
		if bo.o == nil {
			continue
		}
		if f, ok := first[bo.o.ID]; ok {
			bo.o, bo.fresh, bo.dup = f.o, f.fresh, true
			continue
		}
		first[bo.o.ID] = bo
	}
}

// insertOrders inserts rows into one order table, skipping repeats of a
// (user, request), and records in landed the ids that were inserted.
func (s *Service) insertOrders(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, rows []*batchOrder, landed map[int64]bool) error {
	ignore := "INSERT OR IGNORE"
	if s.isMySQL() {
		ignore = "INSERT IGNORE"
	}
	var q strings.Builder
	q.WriteString(ignore + ` INTO ` + sh.Table + ` (` + orderColumns + `) VALUES `)
	args := make([]any, 0, 10*len(rows))
	ids := make([]any, len(rows))
	for i, bo := range rows {
		o := bo.o
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString(`(?, ?, ?, ?, 1, ?, ?, ?, 0, '', 0, 0, ?, ?, 0, 0, ?)`)
		items, _ := json.Marshal(o.Items) // plain structs: cannot fail
		args = append(args, o.ID, o.User, o.RequestID, string(Pending), o.Amount, o.Currency, string(items), ms(o.CreatedAt), ms(o.PayDeadline), ms(o.CreatedAt))
		ids[i] = o.ID
	}
	if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
		return err
	}
	query, inArgs, err := sqlx.In(`SELECT id FROM `+sh.Table+` WHERE id IN (?)`, ids)
	if err != nil {
		return err
	}
	var got []int64
	if err := tx.SelectContext(ctx, &got, query, inArgs...); err != nil {
		return err
	}
	for _, id := range got {
		landed[id] = true
	}
	return nil
}

// line is one SKU line of a batch order.
type line struct {
	bo  *batchOrder
	sku string
	qty int64
}

// reserveBatch reserves the lines of every order not yet reserved, one
// transaction per inventory database (in parallel), then marks the fully
// reserved orders, one transaction per order database; an order with a
// short line is closed, which cancels the lines it did get.
func (s *Service) reserveBatch(ctx context.Context, b []*batchOrder) {
	byDB := map[int][]line{}
	var want []*batchOrder
	for _, bo := range b {
		if bo.err != nil || bo.dup || bo.o.Status != Pending || bo.o.stock != stockNone {
			continue
		}
		want = append(want, bo)
		for _, it := range bo.o.Items {
			dbi := s.inventory.ByKey(it.SKU).DBIndex
			byDB[dbi] = append(byDB[dbi], line{bo, it.SKU, it.Qty})
		}
	}
	short := make([]map[*batchOrder]error, len(s.dbs))
	var g errgroup.Group
	for dbi, lines := range byDB {
		g.Go(func() error {
			short[dbi] = s.reserveLines(ctx, s.dbs[dbi], lines)
			return nil
		})
	}
	g.Wait()
	failed := map[*batchOrder]error{}
	for _, m := range short {
		for bo, err := range m {
			failed[bo] = err
		}
	}
	perDB(ctx, want, func(bo *batchOrder) int {
		if _, bad := failed[bo]; bad {
			return -1
		}
		return s.shardOfID(bo.o.ID).DBIndex
	}, func(ctx context.Context, dbi int, members []*batchOrder) {
		reserved, err := s.markReserved(ctx, s.dbs[dbi], members)
		for _, bo := range members {
			switch {
			case err != nil:
				bo.err = fmt.Errorf("order: mark reserved: %w", err) // a repeat of the request finishes it
			case reserved[bo.o.ID]:
				bo.o.stock, bo.o.Reserved = stockReserved, true
			default: // closed meanwhile; its close cancels what we reserved
				o, err := s.get(ctx, bo.o.ID)
				bo.o, bo.err = &o, err
			}
		}
	})
	for bo, cause := range failed {
		if !errors.Is(cause, ErrOutOfStock) && !errors.Is(cause, ErrHanging) && !errors.Is(cause, ErrNotFound) && !errors.Is(cause, ErrInvalid) {
			bo.err = cause // infrastructure: a repeat of the request finishes it
			continue
		}
		closed, err := s.close(ctx, bo.o.ID, ReasonOutOfStock)
		if err != nil {
			bo.err = errors.Join(cause, err)
			continue
		}
		*bo.o, bo.err = closed, cause
		if errors.Is(cause, ErrHanging) && closed.CloseReason != ReasonOutOfStock {
			bo.err = nil // it timed out or was cancelled while we reserved: that is its answer
		}
	}
}

// reserveLines reserves lines in one inventory database in one
// transaction, and returns the orders that could not get a line. Lines of
// fresh orders of one SKU are taken with one UPDATE when the stock covers
// them all (no barrier can exist for an order this batch just made); any
// other line goes through the per-line TCC try.
func (s *Service) reserveLines(ctx context.Context, db *sqlx.DB, lines []line) map[*batchOrder]error {
	// One order of SKUs in every transaction: two batches never wait on
	// each other's rows in opposite orders.
	slices.SortFunc(lines, func(a, b line) int { return cmp.Or(cmp.Compare(a.sku, b.sku), cmp.Compare(a.bo.o.ID, b.bo.o.ID)) })
	// Made before the transaction: when BEGIN itself fails, every line is
	// recorded as failed below.
	failed := map[*batchOrder]error{}
	err := inTx(ctx, db, func(tx *sqlx.Tx) error {
		clear(failed)
		for i := 0; i < len(lines); {
			j := i
			for j < len(lines) && lines[j].sku == lines[i].sku {
				j++
			}
			if err := s.reserveSKU(ctx, tx, lines[i:j], failed); err != nil {
				return err
			}
			i = j
		}
		return nil
	})
	if err != nil {
		for _, l := range lines {
			failed[l.bo] = err
		}
	}
	return failed
}

// reserveSKU reserves the lines of one SKU inside tx.
func (s *Service) reserveSKU(ctx context.Context, tx *sqlx.Tx, lines []line, failed map[*batchOrder]error) error {
	sh := s.inventory.ByKey(lines[0].sku)
	var fresh []line
	var total int64
	for _, l := range lines {
		if l.bo.fresh && failed[l.bo] == nil {
			fresh = append(fresh, l)
			total += l.qty
		}
	}
	if len(fresh) > 1 {
		ok, err := s.takeAll(ctx, tx, sh, fresh, total)
		if err != nil {
			return err
		}
		if ok {
			lines = slices.DeleteFunc(slices.Clone(lines), func(l line) bool { return l.bo.fresh && failed[l.bo] == nil })
		}
	}
	for _, l := range lines {
		if _, gone := failed[l.bo]; gone {
			continue
		}
		err := s.tryIn(ctx, tx, l.bo.o.ID, l.sku, l.qty)
		if errors.Is(err, ErrOutOfStock) || errors.Is(err, ErrHanging) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
			failed[l.bo] = err
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// takeAll reserves every line of one SKU with one barrier INSERT and one
// stock UPDATE, or — when a barrier exists already (a concurrent repeat of
// an order reserved it) or the stock does not cover them all — changes
// nothing and reports false, leaving the lines to the per-line try.
func (s *Service) takeAll(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, lines []line, total int64) (bool, error) {
	err := s.insertBarriers(ctx, tx, sh, lines)
	if sqlutil.IsDuplicate(err) {
		return false, nil // the failed statement inserted nothing; the transaction goes on
	}
	if err != nil {
		return false, err
	}
	ok, err := s.take(ctx, tx, sh, lines[0].sku, total)
	if err != nil || ok {
		return ok, err
	}
	ids := make([]any, len(lines))
	for i, l := range lines {
		ids[i] = l.bo.o.ID
	}
	q, args, err := sqlx.In(`DELETE FROM `+gene.Sibling(sh, "inventory_tx")+` WHERE sku = ? AND order_id IN (?)`, lines[0].sku, ids)
	if err == nil {
		_, err = tx.ExecContext(ctx, q, args...)
	}
	return false, err
}

// insertBarriers records tried reservations for lines, in one statement.
func (s *Service) insertBarriers(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, lines []line) error {
	var q strings.Builder
	q.WriteString(`INSERT INTO ` + gene.Sibling(sh, "inventory_tx") + ` (order_id, sku, qty, state, updated_at) VALUES `)
	args := make([]any, 0, 5*len(lines))
	now := s.now()
	for i, l := range lines {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString(`(?, ?, ?, ?, ?)`)
		args = append(args, l.bo.o.ID, l.sku, l.qty, barrierTried, now)
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

// markReserved marks pending orders reserved, one UPDATE per table, and
// returns the ids it marked (an order closed meanwhile is not).
func (s *Service) markReserved(ctx context.Context, db *sqlx.DB, members []*batchOrder) (map[int64]bool, error) {
	byTable := map[string][]any{}
	for _, bo := range members {
		t := s.shardOfID(bo.o.ID).Table
		byTable[t] = append(byTable[t], bo.o.ID)
	}
	reserved := map[int64]bool{}
	err := inTx(ctx, db, func(tx *sqlx.Tx) error {
		clear(reserved)
		for table, ids := range byTable {
			q, args, err := sqlx.In(`UPDATE `+table+` SET stock = ? WHERE status = ? AND stock = ? AND id IN (?)`, stockReserved, string(Pending), stockNone, ids)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err == nil && int(n) == len(ids) {
				for _, id := range ids {
					reserved[id.(int64)] = true
				}
				continue
			}
			q, args, err = sqlx.In(`SELECT id FROM `+table+` WHERE status = ? AND stock = ? AND id IN (?)`, string(Pending), stockReserved, ids)
			if err != nil {
				return err
			}
			var got []int64
			if err := tx.SelectContext(ctx, &got, q, args...); err != nil {
				return err
			}
			for _, id := range got {
				reserved[id] = true
			}
		}
		return nil
	})
	return reserved, err
}
