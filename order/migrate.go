package order

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// tableDDL is one table with its secondary indexes, written once for both
// dialects: {{key}} is a case-sensitive ASCII key column, {{serial}} an
// auto-increment primary key.
type tableDDL struct {
	name    string
	columns string
	indexes []string // "name (col, col)"; a leading "UNIQUE " makes it unique
}

// Per order shard: orders, payment attempts, callbacks seen, refunds.
func orderTables(sh shard.Shard) []tableDDL {
	return []tableDDL{{
		name: sh.Table,
		columns: `id BIGINT NOT NULL PRIMARY KEY,
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
		indexes: []string{"UNIQUE uq_request (user_id, request_id)", "ix_user (user_id, id)", "ix_status (status, pay_deadline)", "ix_stock (stock)", "ix_created (created_at)"},
	}, {
		name: sibling(sh, "payments"),
		columns: `pay_no BIGINT NOT NULL PRIMARY KEY,
			order_id BIGINT NOT NULL,
			channel VARCHAR(32) NOT NULL,
			amount BIGINT NOT NULL,
			currency CHAR(3) NOT NULL,
			status VARCHAR(16) NOT NULL,
			gateway_txn {{key}} NULL,
			created_at BIGINT NOT NULL,
			paid_at BIGINT NOT NULL`,
		indexes: []string{"ix_order (order_id)", "ix_paid (paid_at)"},
	}, {
		name: sibling(sh, "pay_callbacks"),
		columns: `gateway_txn {{key}} NOT NULL PRIMARY KEY,
			pay_no BIGINT NOT NULL,
			outcome VARCHAR(24) NOT NULL,
			detail VARCHAR(255) NOT NULL,
			received_at BIGINT NOT NULL`,
	}, {
		name: sibling(sh, "refunds"),
		columns: `refund_no BIGINT NOT NULL PRIMARY KEY,
			order_id BIGINT NOT NULL,
			pay_no BIGINT NOT NULL,
			amount BIGINT NOT NULL,
			reason VARCHAR(32) NOT NULL,
			dedupe {{key}} NOT NULL,
			status VARCHAR(16) NOT NULL,
			created_at BIGINT NOT NULL`,
		indexes: []string{"UNIQUE uq_dedupe (dedupe)", "ix_order (order_id)"},
	}}
}

// Per inventory shard: stock per SKU and the reservation barrier.
func inventoryTables(sh shard.Shard) []tableDDL {
	return []tableDDL{{
		name: sh.Table,
		columns: `sku {{key}} NOT NULL PRIMARY KEY,
			price BIGINT NOT NULL,
			available BIGINT NOT NULL,
			locked BIGINT NOT NULL,
			sold BIGINT NOT NULL`,
	}, {
		name: sibling(sh, "inventory_tx"),
		columns: `order_id BIGINT NOT NULL,
			sku {{key}} NOT NULL,
			qty BIGINT NOT NULL,
			state VARCHAR(16) NOT NULL,
			updated_at BIGINT NOT NULL,
			PRIMARY KEY (order_id, sku)`,
	}}
}

// Per database: the outbox; on the first, the reconciliation review table.
var (
	outboxTable = tableDDL{
		name: "order_outbox",
		columns: `id {{serial}},
			event_id {{key}} NOT NULL,
			order_id BIGINT NOT NULL,
			payload TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			sent_at BIGINT NOT NULL`,
		indexes: []string{"UNIQUE uq_event (event_id)", "ix_unsent (sent_at, id)"},
	}
	reviewTable = tableDDL{
		name: "order_review",
		columns: `id {{serial}},
			dedupe {{key}} NOT NULL,
			kind VARCHAR(32) NOT NULL,
			gateway_txn {{key}} NOT NULL,
			order_id BIGINT NOT NULL,
			detail VARCHAR(255) NOT NULL,
			found_at BIGINT NOT NULL`,
		indexes: []string{"UNIQUE uq_dedupe (dedupe)"},
	}
)

// statements renders t for db's dialect: MySQL takes indexes inside CREATE
// TABLE (it has no CREATE INDEX IF NOT EXISTS), SQLite as separate
// statements.
func (t tableDDL) statements(db *sqlx.DB) []string {
	mysql := sqlutil.IsMySQL(db)
	serial := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if mysql {
		serial = "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
	}
	cols := strings.NewReplacer("{{key}}", sqlutil.BinaryKey(db, 64), "{{serial}}", serial).Replace(t.columns)
	var inline []string
	var after []string
	for _, ix := range t.indexes {
		unique := strings.HasPrefix(ix, "UNIQUE ")
		name, colList, _ := strings.Cut(strings.TrimPrefix(ix, "UNIQUE "), " ")
		switch {
		case mysql && unique:
			inline = append(inline, "UNIQUE KEY "+name+" "+colList)
		case mysql:
			inline = append(inline, "KEY "+name+" "+colList)
		case unique:
			after = append(after, fmt.Sprintf("CREATE UNIQUE INDEX IF NOT EXISTS %s_%s ON %s %s", t.name, name, t.name, colList))
		default:
			after = append(after, fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_%s ON %s %s", t.name, name, t.name, colList))
		}
	}
	if len(inline) > 0 {
		cols += ",\n\t\t\t" + strings.Join(inline, ",\n\t\t\t")
	}
	return append([]string{"CREATE TABLE IF NOT EXISTS " + t.name + " (\n\t\t\t" + cols + "\n\t\t)"}, after...)
}

// Migrate creates every table that does not exist yet, on every database.
func (s *Service) Migrate(ctx context.Context) error {
	type job struct {
		db *sqlx.DB
		t  tableDDL
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
			for _, stmt := range j.t.statements(j.db) {
				if _, err := j.db.ExecContext(gctx, stmt); err != nil {
					return fmt.Errorf("order: migrate %s: %w", j.t.name, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}
