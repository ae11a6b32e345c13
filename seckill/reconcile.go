package seckill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/casebook-dev/casebook/internal/luascript"
	"github.com/casebook-dev/casebook/order"
)

// Report compares Redis with SQL, the record, for one campaign. Each bucket
// is read at one instant, but buckets and SQL one after the other: a report
// taken while the sale runs can show a passing difference (a release, a
// payment or a purchase from another bucket between the reads). A loss
// stays until repaired: alert on a difference seen twice.
type Report struct {
	SQLStock   int64 `json:"sql_stock"`   // units available in SQL (the order block's inventory)
	RedisStock int64 `json:"redis_stock"` // units left in Redis, all buckets
	// InFlight is the units of reservations open in Redis whose orders SQL
	// has not recorded yet: their events are in the outbox or in Kafka.
	InFlight int64 `json:"in_flight"`
	// Drift is RedisStock + InFlight − SQLStock: 0 when Redis and SQL
	// agree; above 0 Redis would sell units SQL does not have (their orders
	// would be closed out of stock), below 0 units are out of sale
	// (undersell).
	Drift int64 `json:"drift"`
	// LostBuckets counts buckets whose state Redis lost entirely (a restart
	// without persistence): Buy answers ErrStateLost there.
	LostBuckets int `json:"lost_buckets"`
	// Missing counts unpaid orders in SQL whose reservation Redis lacks (a
	// failover lost it): their units cannot come back to Redis.
	Missing int `json:"missing"`
	// Stale counts reservations open in Redis whose orders closed (their
	// units are back in SQL, or SQL never had them): a release the gate
	// missed. A paid order's reservation stays open until its deadline or
	// its event; it is not stale.
	Stale int `json:"stale"`
	// ShortQuotas counts users whose quota in Redis is below the units their
	// orders and open reservations hold: they could buy past the limit.
	ShortQuotas int `json:"short_quotas"`
	// Repaired is set when Reconcile rebuilt Redis.
	Repaired bool `json:"repaired"`
}

// OK reports whether Redis agrees with SQL.
func (r Report) OK() bool {
	return r.Drift == 0 && r.LostBuckets == 0 && r.Missing == 0 && r.Stale == 0 && r.ShortQuotas == 0
}

// Reconcile compares the campaign's Redis state with SQL and, with repair,
// rebuilds Redis from SQL wherever they disagree: each bucket's stock (SQL's
// stock less the units in flight, split evenly), its open reservations with
// their deadlines (SQL's pending orders plus the reservations in flight), and
// quotas raised to what each user's orders and reservations hold.
//
// A repair may run during the sale: it fences the buckets (purchases wait,
// see maxFenceWait), reads them and SQL, closes the reservations whose
// orders closed (units and quota back once, as ReleaseDue would), and
// rewrites each bucket in one script only if nothing changed it since it was
// read (a release or quota return may still); a bucket that changed is read
// again. A bucket still changing after ten rounds gets its stock corrected
// (the totals agree) and the error asks for another repair.
//
// Orders in flight are counted from Redis: a reservation open in Redis that
// SQL has not recorded keeps its units, quota and deadline. An event relayed
// to Kafka whose reservation Redis has lost is invisible here, so after a
// failover repair once the consumer has caught up with the order topic (see
// doc.go).
func (sl *Sale) Reconcile(ctx context.Context, repair bool) (Report, error) {
	ctx, call := sl.s.obs.reconcile.Start(ctx)
	rep, err := sl.reconcile(ctx, repair)
	switch {
	case rep.Repaired:
		sl.s.log.Info("seckill: reconcile rebuilt Redis from SQL", "campaign", sl.c.ID, "report", rep)
	case err == nil && !rep.OK():
		sl.s.log.Warn("seckill: reconcile found Redis and SQL apart", "campaign", sl.c.ID, "repair", repair, "report", rep)
	}
	if in := sl.s.obs; err == nil && in.block.Metering() {
		in.drift.Record(ctx, rep.Drift, metric.WithAttributeSet(sl.attrs))
	}
	return rep, call.End(err)
}

func (sl *Sale) reconcile(ctx context.Context, repair bool) (Report, error) {
	buckets, rec, err := sl.read(ctx)
	if err != nil {
		return Report{}, err
	}
	_, rep := sl.plan(buckets, rec)
	if !repair || rep.OK() {
		return rep, nil
	}
	return sl.repair(ctx)
}

// Fences: a repair holds off new purchases on a bucket for at most fenceTTL
// (should the repairing process die), and a buyer waits for at most
// maxFenceWait before being told ErrStateLost.
const (
	fenceTTL     = 5 * time.Second
	maxFenceWait = 2 * time.Second
)

// maxRepairRounds bounds the rounds of a repair whose buckets keep changing.
const maxRepairRounds = 10

// closeStale closes the reservations Redis holds whose orders closed, as
// ReleaseDue would: units back (unless SQL never had them) and the quota
// once. It returns how many it closed.
func (sl *Sale) closeStale(ctx context.Context, buckets []bucketState, rec record) (int, error) {
	closed := 0
	for b, st := range buckets {
		for id := range st.res {
			o, ok := rec.orders[id]
			if !ok || o.State != released && o.State != rejected {
				continue
			}
			if _, err := sl.close(ctx, b, id, o.State == released); err != nil {
				return closed, err
			}
			closed++
		}
	}
	return closed, nil
}

// repair rebuilds every bucket and returns the report of what it found.
//
// Reservations whose orders closed (stale) are first closed the usual way,
// units and quota back once, so that the rebuild, which only raises quotas,
// never swallows a quota the order's late event can no longer return.
//
// Buckets are rewritten one by one, each only if unchanged since it was
// read; one that changed sends the whole repair round again. After
// maxRepairRounds, the buckets not rewritten in the last round get only
// their stock corrected, by the difference between that round's plan and
// what it read (INCRBY): a change in a fenced bucket is a release or a
// close, which moves Redis and SQL by the same units, so the totals agree
// whatever happened meanwhile — but those buckets keep their reservations
// and quotas, and the error says to run the repair again.
func (sl *Sale) repair(ctx context.Context) (Report, error) {
	defer sl.unfence(context.WithoutCancel(ctx))
	stale := 0 // closed here before the plan: still what the report found
	for attempt := 1; ; attempt++ {
		if err := sl.fence(ctx); err != nil {
			return Report{}, err
		}
		buckets, rec, err := sl.read(ctx)
		if err != nil {
			return Report{}, err
		}
		if n, err := sl.closeStale(ctx, buckets, rec); err != nil {
			return Report{}, err
		} else if n > 0 {
			stale += n
			continue // read again: the closes changed the buckets
		}
		want, rep := sl.plan(buckets, rec)
		rep.Stale += stale
		done, err := sl.rebuild(ctx, buckets, want)
		rep.Repaired = err == nil && done == len(buckets)
		if err != nil || rep.Repaired {
			return rep, err
		}
		if attempt == maxRepairRounds {
			pipe := sl.s.rdb.Pipeline()
			for b := done; b < len(buckets); b++ {
				pipe.IncrBy(ctx, sl.key(b, "stock"), want[b].stock-buckets[b].stock)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return rep, fmt.Errorf("seckill: reconcile %s: correct stock: %w", sl.c.ID, err)
			}
			return rep, fmt.Errorf("seckill: reconcile %s: buckets %d.. kept changing during the repair: their stock is corrected, their reservations and quotas not; run it again", sl.c.ID, done)
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(rand.N(time.Duration(attempt) * time.Millisecond)):
		}
	}
}

func (sl *Sale) fence(ctx context.Context) error {
	pipe := sl.s.rdb.Pipeline()
	for b := range sl.c.Buckets {
		pipe.Set(ctx, sl.key(b, "fence"), 1, fenceTTL)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("seckill: fence %s: %w", sl.c.ID, err)
	}
	return nil
}

// unfence lifts the fences a failed repair left (best effort: they expire).
func (sl *Sale) unfence(ctx context.Context) {
	pipe := sl.s.rdb.Pipeline()
	for b := range sl.c.Buckets {
		pipe.Del(ctx, sl.key(b, "fence"))
	}
	pipe.Exec(ctx)
}

// read reads Redis, then SQL: a reservation Redis holds is either in SQL's
// snapshot or still in flight.
func (sl *Sale) read(ctx context.Context) ([]bucketState, record, error) {
	buckets, err := sl.readBuckets(ctx)
	if err != nil {
		return nil, record{}, err
	}
	rec, err := sl.readRecord(ctx, buckets)
	return buckets, rec, err
}

// bucketState is one bucket as Reconcile read it.
type bucketState struct {
	version string // "0" when absent
	stock   int64
	lost    bool // no stock key: Redis lost the bucket
	res     map[string]string
	due     map[string]float64
	quota   map[string]string
}

// readBuckets reads each bucket at one instant (a script), all buckets in
// one pipeline.
func (sl *Sale) readBuckets(ctx context.Context) ([]bucketState, error) {
	calls := make([]luascript.Call, sl.c.Buckets)
	for b := range calls {
		calls[b] = luascript.Call{Script: snapshotScript, Keys: sl.bucketKeys(b, "version", "stock", "res", "due", "quota")}
	}
	cmds, err := luascript.RunAll(ctx, sl.s.rdb, calls)
	if err != nil {
		return nil, fmt.Errorf("seckill: read Redis state of %s: %w", sl.c.ID, err)
	}
	out := make([]bucketState, len(cmds))
	for b, cmd := range cmds {
		if out[b], err = sl.parseSnapshot(b, cmd.Val()); err != nil {
			return nil, fmt.Errorf("seckill: read Redis state of %s/%d: %w", sl.c.ID, b, err)
		}
	}
	return out, nil
}

// parseSnapshot reads bucket b's snapshot, its batches' records and
// deadlines spread into reservations by id. A malformed record is skipped
// (the rebuild drops it).
func (sl *Sale) parseSnapshot(b int, v any) (bucketState, error) {
	parts, ok := v.([]any)
	if !ok || len(parts) != 5 {
		return bucketState{}, fmt.Errorf("snapshot %v", v)
	}
	st := bucketState{version: "0", lost: parts[1] == nil, res: map[string]string{}, quota: pairs(parts[4]), due: map[string]float64{}}
	if v, ok := parts[0].(string); ok {
		st.version = v
	}
	if v, ok := parts[1].(string); ok {
		st.stock, _ = strconv.ParseInt(v, 10, 64)
	}
	due := pairs(parts[3])
	for batch, rec := range pairs(parts[2]) {
		n, err := strconv.ParseInt(batch, 10, 64)
		if err != nil || n < 1 {
			continue
		}
		open, err := sl.expand(b, n, rec)
		if err != nil {
			continue
		}
		for id, r := range open {
			st.res[id] = r
			if score, ok := due[batch]; ok {
				st.due[id], _ = strconv.ParseFloat(score, 64)
			}
		}
	}
	return st, nil
}

// pairs turns a flat reply list (field, value, …) into a map.
func pairs(v any) map[string]string {
	list, _ := v.([]any)
	m := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		m[k], _ = list[i+1].(string)
	}
	return m
}

// record is SQL's view of the campaign: the SKU's available units and the
// campaign's orders, by reservation id.
type record struct {
	stock  int64
	orders map[string]orderRow
}

// What an order means for its reservation.
const (
	held     = "held"     // its units are out of Available: unpaid (or closing)
	sold     = "sold"     // paid: units and quota used for good
	released = "released" // closed: its units went back to Available
	rejected = "rejected" // closed out of stock: it never had SQL units
)

type orderRow struct {
	User  string
	Qty   int64
	State string
	PayBy int64
}

// readRecord reads the SKU's stock and its holds in one snapshot, then the
// orders of the holds; a reservation open in Redis that no hold names is
// looked up by its buyer and id, to find the orders SQL closed out of stock.
// The rest are in flight: their orders are not created or not reserved yet.
func (sl *Sale) readRecord(ctx context.Context, buckets []bucketState) (record, error) {
	rec := record{orders: map[string]orderRow{}}
	st, holds, err := sl.s.orders.Holds(ctx, sl.c.SKU)
	if err != nil {
		return record{}, fmt.Errorf("seckill: read SQL record of %s: %w", sl.c.ID, err)
	}
	rec.stock = st.Available
	ids := make([]int64, len(holds))
	for i, h := range holds {
		ids[i] = h.Order
	}
	orders, err := sl.s.orders.GetMany(ctx, ids)
	if err != nil {
		return record{}, fmt.Errorf("seckill: read SQL record of %s: %w", sl.c.ID, err)
	}
	for _, h := range holds {
		o, ok := orders[h.Order]
		if !ok || !strings.HasPrefix(o.RequestID, sl.c.ID+"-") {
			continue // not a reservation of this campaign
		}
		row := orderRow{User: o.User, Qty: h.Qty, PayBy: o.PayDeadline.UnixMilli(), State: held}
		switch {
		case h.State == order.HoldSold || h.State == order.HoldReserved && o.Status != order.Pending && o.Status != order.Closed:
			row.State = sold // paid; a reserved hold of a paid order is being confirmed
		case h.State == order.HoldReleased:
			row.State = released
		}
		rec.orders[o.RequestID] = row
	}
	for _, st := range buckets {
		for id, v := range st.res {
			if _, ok := rec.orders[id]; ok {
				continue
			}
			user, qty, _, err := parseReservation(v)
			if err != nil {
				continue
			}
			o, err := sl.s.orders.ByRequest(ctx, user, id)
			if errors.Is(err, order.ErrNotFound) || errors.Is(err, order.ErrInvalid) {
				continue
			}
			if err != nil {
				return record{}, fmt.Errorf("seckill: read SQL record of %s: %w", sl.c.ID, err)
			}
			if o.Status == order.Closed && o.CloseReason == order.ReasonOutOfStock {
				rec.orders[id] = orderRow{User: user, Qty: qty, PayBy: o.PayDeadline.UnixMilli(), State: rejected}
			}
		}
	}
	return rec, nil
}

// bucketPlan is what one bucket should hold: its open reservations by id
// ("user|qty|home") with their deadlines, and quotas.
type bucketPlan struct {
	stock int64
	Res   map[string]string
	Due   map[string]int64
	Quota map[string]int64
}

// wirePlan is a bucketPlan as rebuild.lua takes it: the reservations as
// batch records, with one deadline per batch.
type wirePlan struct {
	Res   map[string]string `json:"res"`
	Due   map[string]int64  `json:"due"`
	Quota map[string]int64  `json:"quota"`
}

// wire groups the plan's reservations into their batches' records. The
// slots of a batch share its home and its deadline (one script call made
// them); should the record's sources disagree, the earliest deadline wins.
func (p bucketPlan) wire() wirePlan {
	type batch struct {
		home  int
		slots []slotRecord
	}
	batches := map[string]*batch{}
	w := wirePlan{Res: map[string]string{}, Due: map[string]int64{}, Quota: p.Quota}
	for id, v := range p.Res {
		rid, err1 := splitID(id)
		user, qty, home, err2 := parseReservation(v)
		if err1 != nil || err2 != nil {
			continue
		}
		n := strconv.FormatInt(rid.batch, 10)
		bt := batches[n]
		if bt == nil {
			bt = &batch{home: home}
			batches[n] = bt
		}
		bt.slots = append(bt.slots, slotRecord{slot: rid.slot, user: user, qty: qty})
		if due, ok := w.Due[n]; !ok || p.Due[id] < due {
			w.Due[n] = p.Due[id]
		}
	}
	for n, bt := range batches {
		slices.SortFunc(bt.slots, func(a, b slotRecord) int { return a.slot - b.slot })
		w.Res[n] = formatRecord(bt.home, bt.slots)
	}
	return w
}

// plan derives from what Redis and SQL hold what each bucket should hold,
// and the report of where they disagree.
func (sl *Sale) plan(buckets []bucketState, rec record) ([]bucketPlan, Report) {
	rep := Report{SQLStock: rec.stock}
	want := make([]bucketPlan, len(buckets))
	for b := range want {
		want[b] = bucketPlan{Res: map[string]string{}, Due: map[string]int64{}, Quota: map[string]int64{}}
	}
	hold := func(user string, h int, qty int64) { want[h].Quota[user] += qty }
	for b, st := range buckets {
		rep.RedisStock += st.stock
		if st.lost {
			rep.LostBuckets++
		}
		for id, v := range st.res {
			user, qty, h, err := parseReservation(v)
			if err != nil || h >= len(want) {
				continue // not ours to keep: the rebuild drops it
			}
			if o, ok := rec.orders[id]; ok {
				if o.State == released || o.State == rejected {
					rep.Stale++
				}
				continue
			}
			rep.InFlight += qty
			want[b].Res[id] = v
			if due, ok := st.due[id]; ok {
				want[b].Due[id] = int64(due)
			} else {
				want[b].Due[id] = sl.s.deadline()
			}
			hold(user, h, qty)
		}
	}
	for id, o := range rec.orders {
		if o.State != held && o.State != sold {
			continue
		}
		h := sl.home(o.User)
		hold(o.User, h, o.Qty)
		if o.State == sold {
			continue
		}
		rid, err := splitID(id)
		if err != nil || rid.bucket >= len(want) {
			continue
		}
		b := rid.bucket
		if _, ok := buckets[b].res[id]; !ok {
			rep.Missing++
		}
		want[b].Res[id] = reservationValue(o.User, o.Qty, h)
		want[b].Due[id] = o.PayBy
	}
	for h, p := range want {
		for user, units := range p.Quota {
			if had, _ := strconv.ParseInt(buckets[h].quota[user], 10, 64); had < units {
				rep.ShortQuotas++
			}
		}
	}
	rep.Drift = rep.RedisStock + rep.InFlight - rep.SQLStock
	available := max(0, rep.SQLStock-rep.InFlight)
	for b := range want {
		want[b].stock = available / int64(len(want))
		if int64(b) < available%int64(len(want)) {
			want[b].stock++
		}
	}
	return want, rep
}

// rebuild writes the plan bucket by bucket, lifting each bucket's fence, and
// returns how many buckets it rewrote before one had changed since it was
// read.
func (sl *Sale) rebuild(ctx context.Context, buckets []bucketState, want []bucketPlan) (int, error) {
	for b, p := range want {
		state, err := json.Marshal(p.wire())
		if err != nil {
			return b, err
		}
		keys := sl.bucketKeys(b, "stock", "quota", "res", "due", "version", "fence")
		done, err := rebuildScript.Run(ctx, sl.s.rdb, keys, buckets[b].version, p.stock, state).Bool()
		if err != nil {
			return b, fmt.Errorf("seckill: rebuild %s/%d: %w", sl.c.ID, b, err)
		}
		if !done {
			return b, nil
		}
	}
	return len(want), nil
}
