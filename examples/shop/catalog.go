package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/casebook-dev/casebook/order"
)

// Product is a product's detail page. Price comes from the order block's
// inventory, the one price every order is charged.
type Product struct {
	SKU         string `json:"sku" db:"sku"`
	Name        string `json:"name" db:"name"`
	Description string `json:"description" db:"description"`
	Price       int64  `json:"price" db:"-"`
	Currency    string `json:"currency" db:"-"`
}

var errNoProduct = errors.New("shop: no such product")

// catalog reads product detail through two caches: the process's own
// (ristretto, a second), then Redis (a minute), then SQL; a product that does
// not exist is cached as such for a few seconds, so a flood of bad SKUs never
// reaches SQL, and concurrent misses of one SKU load it once (singleflight).
type catalog struct {
	db     *sqlx.DB
	rdb    redis.UniversalClient
	orders *order.Service
	local  *ristretto.Cache[string, *Product] // nil *Product: known missing
	loads  singleflight.Group
	ns     string
	tel    *telemetry // counts the lookups by layer
}

const (
	localTTL    = time.Second
	redisTTL    = time.Minute
	negativeTTL = 5 * time.Second
)

func newCatalog(ctx context.Context, db *sqlx.DB, rdb redis.UniversalClient, orders *order.Service, ns string, tel *telemetry) (*catalog, error) {
	local, err := ristretto.NewCache(&ristretto.Config[string, *Product]{NumCounters: 100_000, MaxCost: 10_000, BufferItems: 64})
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS shop_products (
		sku VARCHAR(64) NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, description TEXT NOT NULL)`); err != nil {
		return nil, fmt.Errorf("shop: products table: %w", err)
	}
	return &catalog{db: db, rdb: rdb, orders: orders, local: local, ns: ns, tel: tel}, nil
}

// put records a product's description (its price and stock are the order
// block's).
func (c *catalog) put(ctx context.Context, p Product) error {
	_, err := c.db.ExecContext(ctx, `INSERT INTO shop_products (sku, name, description) VALUES (?, ?, ?)`, p.SKU, p.Name, p.Description)
	if err != nil {
		return fmt.Errorf("shop: put product %s: %w", p.SKU, err)
	}
	c.rdb.Del(ctx, c.key(p.SKU))
	c.local.Del(p.SKU)
	return nil
}

func (c *catalog) key(sku string) string { return c.ns + ":product:" + sku }

func (c *catalog) get(ctx context.Context, sku string) (Product, error) {
	if len(sku) == 0 || len(sku) > 64 {
		return Product{}, errNoProduct
	}
	if p, ok := c.local.Get(sku); ok {
		c.tel.looked(ctx, c.tel.localHit)
		if p == nil {
			return Product{}, errNoProduct
		}
		return *p, nil
	}
	c.tel.looked(ctx, c.tel.localMiss)
	v, err, _ := c.loads.Do(sku, func() (any, error) { return c.load(ctx, sku) })
	if err != nil {
		return Product{}, err
	}
	p := v.(*Product)
	c.local.SetWithTTL(sku, p, 1, localTTL)
	if p == nil {
		return Product{}, errNoProduct
	}
	return *p, nil
}

// load reads Redis, then SQL, and fills Redis.
func (c *catalog) load(ctx context.Context, sku string) (*Product, error) {
	raw, err := c.rdb.Get(ctx, c.key(sku)).Bytes()
	if err == nil {
		if string(raw) == "-" {
			c.tel.looked(ctx, c.tel.redisHit)
			return nil, nil
		}
		var p Product
		if json.Unmarshal(raw, &p) == nil {
			c.tel.looked(ctx, c.tel.redisHit)
			return &p, nil
		}
	}
	c.tel.looked(ctx, c.tel.redisMiss)
	var p Product
	err = c.db.GetContext(ctx, &p, `SELECT sku, name, description FROM shop_products WHERE sku = ?`, sku)
	if errors.Is(err, sql.ErrNoRows) {
		c.tel.looked(ctx, c.tel.sqlMiss)
		c.rdb.Set(ctx, c.key(sku), "-", negativeTTL)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("shop: read product %s: %w", sku, err)
	}
	c.tel.looked(ctx, c.tel.sqlHit)
	st, err := c.orders.StockOf(ctx, sku)
	if errors.Is(err, order.ErrNotFound) {
		c.rdb.Set(ctx, c.key(sku), "-", negativeTTL)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p.Price, p.Currency = st.Price, "CNY"
	if raw, err := json.Marshal(p); err == nil {
		c.rdb.Set(ctx, c.key(sku), raw, redisTTL)
	}
	return &p, nil
}
