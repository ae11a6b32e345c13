package order

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Per order shard: orders, payment attempts and their request ids,
// callbacks seen, refunds and their lines, parcels. Tables added after the
// first release (pay_requests, refund_lines, parcels; inventory_returns) are
// new tables, never new columns, so Migrate brings an existing database up
// to date with CREATE TABLE IF NOT EXISTS alone: online, no table rewritten
// or locked. Orders made before them need nothing: an item's shipped and
// refunded counts live in its JSON and read as zero when absent, and an
// order shipped whole before parcels existed reads as every unit shipped.
func orderTables(sh shard.Shard) []sqlutil.Table {
	return []sqlutil.Table{{
		Name: sh.Table,
		Columns: `id BIGINT NOT NULL PRIMARY KEY,
			user_id {{key}} NOT NULL,
			request_id {{key}} NOT NULL,
			status VARCHAR(16) NOT NULL,
			version BIGINT NOT NULL,
			amount BIGINT NOT NULL,
			currency CHAR(3) NOT NULL,
			items TEXT NOT NULL,
			stock SMALLINT NOT NULL,
			close_reason VARCHAR(32) NOT NULL,
			pay_no BIGINT NOT NULL,
			refunded BIGINT NOT NULL,
			created_at BIGINT NOT NULL,
			pay_deadline BIGINT NOT NULL,
			paid_at BIGINT NOT NULL,
			shipped_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL`,
		Indexes: []string{"UNIQUE uq_request (user_id, request_id)", "ix_user (user_id, id)", "ix_status (status, pay_deadline)", "ix_stock (stock)", "ix_created (created_at)"},
	}, {
		Name: gene.Sibling(sh, "payments"),
		Columns: `pay_no BIGINT NOT NULL PRIMARY KEY,
			order_id BIGINT NOT NULL,
			channel VARCHAR(32) NOT NULL,
			amount BIGINT NOT NULL,
			currency CHAR(3) NOT NULL,
			status VARCHAR(16) NOT NULL,
			gateway_txn {{key}} NULL,
			created_at BIGINT NOT NULL,
			paid_at BIGINT NOT NULL`,
		Indexes: []string{"ix_order (order_id)", "ix_paid (paid_at)"},
	}, {
		Name: gene.Sibling(sh, "pay_callbacks"),
		Columns: `gateway_txn {{key}} NOT NULL PRIMARY KEY,
			pay_no BIGINT NOT NULL,
			outcome VARCHAR(24) NOT NULL,
			detail VARCHAR(255) NOT NULL,
			received_at BIGINT NOT NULL`,
	}, {
		Name: gene.Sibling(sh, "refunds"),
		Columns: `refund_no BIGINT NOT NULL PRIMARY KEY,
			order_id BIGINT NOT NULL,
			pay_no BIGINT NOT NULL,
			amount BIGINT NOT NULL,
			reason VARCHAR(32) NOT NULL,
			dedupe {{key}} NOT NULL,
			status VARCHAR(16) NOT NULL,
			created_at BIGINT NOT NULL`,
		Indexes: []string{"UNIQUE uq_dedupe (dedupe)", "ix_order (order_id)"},
	}, {
		Name: gene.Sibling(sh, "pay_requests"), // StartPaymentRequest's request ids
		Columns: `dedupe {{key}} NOT NULL PRIMARY KEY,
			pay_no BIGINT NOT NULL`,
	}, {
		Name: gene.Sibling(sh, "refund_lines"),
		Columns: `refund_no BIGINT NOT NULL,
			sku {{key}} NOT NULL,
			order_id BIGINT NOT NULL,
			qty BIGINT NOT NULL,
			amount BIGINT NOT NULL,
			restocked SMALLINT NOT NULL,
			PRIMARY KEY (refund_no, sku)`,
		Indexes: []string{"ix_order (order_id)", "ix_restock (restocked)"},
	}, {
		Name: gene.Sibling(sh, "parcels"),
		Columns: `parcel_no BIGINT NOT NULL PRIMARY KEY,
			order_id BIGINT NOT NULL,
			dedupe {{key}} NOT NULL,
			request_id VARCHAR(64) NOT NULL,
			tracking VARCHAR(64) NOT NULL,
			items TEXT NOT NULL,
			created_at BIGINT NOT NULL`,
		Indexes: []string{"UNIQUE uq_dedupe (dedupe)", "ix_order (order_id)"},
	}}
}

// Per inventory shard: stock per SKU, the reservation barrier, and the
// barrier of line refunds' returns to stock (one row per refund and SKU).
func inventoryTables(sh shard.Shard) []sqlutil.Table {
	return []sqlutil.Table{{
		Name: sh.Table,
		Columns: `sku {{key}} NOT NULL PRIMARY KEY,
			price BIGINT NOT NULL,
			available BIGINT NOT NULL,
			locked BIGINT NOT NULL,
			sold BIGINT NOT NULL`,
	}, {
		Name: gene.Sibling(sh, "inventory_tx"),
		Columns: `order_id BIGINT NOT NULL,
			sku {{key}} NOT NULL,
			qty BIGINT NOT NULL,
			state VARCHAR(16) NOT NULL,
			updated_at BIGINT NOT NULL,
			PRIMARY KEY (order_id, sku)`,
		Indexes: []string{"ix_sku (sku)"}, // Holds
	}, {
		Name: gene.Sibling(sh, "inventory_returns"),
		Columns: `refund_no BIGINT NOT NULL,
			sku {{key}} NOT NULL,
			order_id BIGINT NOT NULL,
			qty BIGINT NOT NULL,
			returned_at BIGINT NOT NULL,
			PRIMARY KEY (refund_no, sku)`,
		Indexes: []string{"ix_sku (sku)"}, // Holds
	}}
}

// Per database: the outbox; on the first, the reconciliation review table.
var (
	outboxTable = sqlutil.Table{
		Name: "order_outbox",
		Columns: `id {{serial}},
			event_id {{key}} NOT NULL,
			order_id BIGINT NOT NULL,
			payload TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			sent_at BIGINT NOT NULL`,
		Indexes: []string{"UNIQUE uq_event (event_id)", "ix_unsent (sent_at, id)"},
	}
	reviewTable = sqlutil.Table{
		Name: "order_review",
		Columns: `id {{serial}},
			dedupe {{key}} NOT NULL,
			kind VARCHAR(32) NOT NULL,
			gateway_txn {{key}} NOT NULL,
			order_id BIGINT NOT NULL,
			detail VARCHAR(255) NOT NULL,
			found_at BIGINT NOT NULL`,
		Indexes: []string{"UNIQUE uq_dedupe (dedupe)"},
	}
)

// Migrate creates every table that does not exist yet, on every database.
func (s *Service) Migrate(ctx context.Context) error {
	ctx, call := s.obs.migrate.Start(ctx)
	return call.End(s.migrate(ctx))
}

func (s *Service) migrate(ctx context.Context) error {
	type job struct {
		db *sqlx.DB
		t  sqlutil.Table
	}
	var jobs []job
	for _, sh := range s.orders.All() {
		for _, t := range orderTables(sh) {
			jobs = append(jobs, job{sh.DB, t})
		}
	}
	for _, sh := range s.inventory.All() {
		for _, t := range inventoryTables(sh) {
			jobs = append(jobs, job{sh.DB, t})
		}
	}
	for _, db := range s.dbs {
		jobs = append(jobs, job{db, outboxTable})
	}
	jobs = append(jobs, job{s.dbs[0], reviewTable})
	if err := s.idSource.CreateTable(ctx); err != nil {
		return fmt.Errorf("order: migrate: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, j := range jobs {
		g.Go(func() error {
			if err := j.t.Create(gctx, j.db); err != nil {
				return fmt.Errorf("order: migrate: %w", err)
			}
			return nil
		})
	}
	return g.Wait()
}
