package signin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// Task is one reward to grant, as the sign script records it.
type Task struct {
	User   string `json:"user"`
	Date   string `json:"date"`
	Kind   string `json:"kind"` // "daily" or "bonus"
	Points int64  `json:"points,string"`
}

// Ledger grants reward tasks exactly once into SQL: a ledger row unique per
// (user, date, kind) and the user's balance, in one transaction. A task
// delivered twice, replayed, or handled by two consumers at once finds the
// row taken and grants nothing the second time.
type Ledger struct {
	db *sqlx.DB
}

// NewLedger returns a ledger on db; Migrate creates its tables.
func NewLedger(db *sqlx.DB) *Ledger { return &Ledger{db: db} }

// Migrate creates the ledger, balance and backup tables if missing.
func (l *Ledger) Migrate(ctx context.Context) error {
	user := sqlutil.BinaryKey(l.db, 128)
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS signin_ledger (
			user_id ` + user + ` NOT NULL,
			day     CHAR(10) NOT NULL,
			kind    VARCHAR(16) NOT NULL,
			points  BIGINT NOT NULL,
			PRIMARY KEY (user_id, day, kind)
		)`,
		`CREATE TABLE IF NOT EXISTS signin_balance (
			user_id ` + user + ` NOT NULL PRIMARY KEY,
			points  BIGINT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS signin_months (
			user_id ` + user + ` NOT NULL,
			month   CHAR(7) NOT NULL,
			days    BIGINT NOT NULL,
			PRIMARY KEY (user_id, month)
		)`,
	} {
		if _, err := l.db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("signin: migrate: %w", err)
		}
	}
	return nil
}

// Grant applies t once; granted is false when it was applied before.
func (l *Ledger) Grant(ctx context.Context, t Task) (granted bool, err error) {
	if err := validUser(t.User); err != nil {
		return false, err
	}
	if _, err := ParseDate(t.Date); err != nil || (t.Kind != "daily" && t.Kind != "bonus") || t.Points < 0 {
		return false, fmt.Errorf("signin: malformed reward task %+v", t)
	}
	tx, err := l.db.BeginTxx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO signin_ledger (user_id, day, kind, points) VALUES (?, ?, ?, ?)`, t.User, t.Date, t.Kind, t.Points)
	if sqlutil.IsDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("signin: ledger: %w", err)
	}
	upsert := `INSERT INTO signin_balance (user_id, points) VALUES (?, ?) ON CONFLICT (user_id) DO UPDATE SET points = points + excluded.points`
	if sqlutil.IsMySQL(l.db) {
		upsert = `INSERT INTO signin_balance (user_id, points) VALUES (?, ?) ON DUPLICATE KEY UPDATE points = points + VALUES(points)`
	}
	if _, err := tx.ExecContext(ctx, upsert, t.User, t.Points); err != nil {
		return false, fmt.Errorf("signin: balance: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("signin: grant: %w", err)
	}
	return true, nil
}

// Handle is a kafka.Handler for the reward topic. A malformed message is
// reported (it would block its partition forever otherwise, so callers
// should log and skip it); infrastructure errors are returned for a retry.
func (l *Ledger) Handle(ctx context.Context, m *sarama.ConsumerMessage) error {
	var t Task
	if err := json.Unmarshal(m.Value, &t); err != nil {
		return fmt.Errorf("signin: reward message at %s/%d/%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	_, err := l.Grant(ctx, t)
	return err
}

// Balance returns user's granted points.
func (l *Ledger) Balance(ctx context.Context, user string) (int64, error) {
	var n int64
	err := l.db.GetContext(ctx, &n, `SELECT COALESCE(SUM(points), 0) FROM signin_balance WHERE user_id = ?`, user)
	return n, err
}

// Entries returns how many ledger rows user has.
func (l *Ledger) Entries(ctx context.Context, user string) (int, error) {
	var n int
	err := l.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM signin_ledger WHERE user_id = ?`, user)
	return n, err
}
