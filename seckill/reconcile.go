package seckill

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed trim.lua
	trimLua    string
	trimScript = redis.NewScript(trimLua)
)

// Report compares Redis with SQL for one campaign. When they agree,
// RedisStock + Unrecorded == SQLStock: Redis has sold exactly what SQL has
// recorded plus the reservations whose events SQL has not seen yet.
type Report struct {
	RedisStock int64 // units left in Redis, all buckets
	Open       int64 // units in open reservations (unpaid, not released)
	Unrecorded int64 // of those, units SQL has no order row for yet
	SQLStock   int64 // units left in SQL
	// Drift is RedisStock + Unrecorded − SQLStock: above 0 Redis would
	// sell units SQL does not have (they would be Rejected); below 0 units
	// are stuck out of sale (undersell).
	Drift int64
	// Trimmed is what Reconcile took out of Redis to bring a positive drift
	// to 0, when asked to repair.
	Trimmed int64
}

// Reconcile reports drift between Redis and SQL and, with repair,
// lowers an overstated Redis stock — the direction that is always safe.
// Stock Redis understates is reported, not added back: the missing units may
// belong to events still in flight. Run it when the order consumer has
// caught up; while events are in Kafka the figures move.
func (sl *Sale) Reconcile(ctx context.Context, repair bool) (Report, error) {
	s, c := sl.s, sl.c
	var r Report
	stock, err := sl.RedisStock(ctx)
	if err != nil {
		return r, err
	}
	r.RedisStock = stock
	for b := range c.Buckets {
		open, err := s.rdb.HGetAll(ctx, sl.key(b, "res")).Result()
		if err != nil {
			return r, fmt.Errorf("seckill: reservations of %s/%d: %w", c.ID, b, err)
		}
		if len(open) == 0 {
			continue
		}
		ids := make([]string, 0, len(open))
		for id, v := range open {
			_, qty, _, err := parseReservation(v)
			if err != nil {
				return r, err
			}
			r.Open += qty
			ids = append(ids, id)
		}
		query, args, err := sqlx.In(`SELECT id FROM seckill_orders WHERE id IN (?)`, ids)
		if err != nil {
			return r, err
		}
		var recorded []string
		if err := s.db.SelectContext(ctx, &recorded, s.db.Rebind(query), args...); err != nil {
			return r, fmt.Errorf("seckill: recorded orders: %w", err)
		}
		known := map[string]bool{}
		for _, id := range recorded {
			known[id] = true
		}
		for id, v := range open {
			if !known[id] {
				_, qty, _, _ := parseReservation(v)
				r.Unrecorded += qty
			}
		}
	}
	if err := s.db.GetContext(ctx, &r.SQLStock, `SELECT n FROM seckill_stock WHERE sku = ?`, c.SKU); err != nil {
		return r, fmt.Errorf("seckill: SQL stock: %w", err)
	}
	r.Drift = r.RedisStock + r.Unrecorded - r.SQLStock
	if repair && r.Drift > 0 {
		for b := 0; b < c.Buckets && r.Trimmed < r.Drift; b++ {
			took, err := trimScript.Run(ctx, s.rdb, []string{sl.key(b, "stock")}, r.Drift-r.Trimmed).Int64()
			if err != nil {
				return r, fmt.Errorf("seckill: trim %s/%d: %w", c.ID, b, err)
			}
			r.Trimmed += took
		}
	}
	return r, nil
}
