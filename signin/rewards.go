package signin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
)

// Task is one reward to grant.
type Task struct {
	User   string `json:"user"`
	Date   string `json:"date"` // the user's local date, YYYY-MM-DD
	Kind   string `json:"kind"` // "daily" or "bonus"
	Points int64  `json:"points"`
}

// RewardVersion is the format version of reward messages this package writes
// and reads.
const RewardVersion = 1

// A reward message (what the relay publishes from the outboxes) has the
// user id as its key and, as its value, JSON of format version 1:
//
//	{"v":1,"user":"alice","date":"2026-11-30","kind":"daily","points":10}
type rewardMessage struct {
	V int `json:"v"`
	Task
}

// EncodeTask returns t as a reward message value (for replays and tests;
// the sign script writes the same format).
func EncodeTask(t Task) []byte {
	b, _ := json.Marshal(rewardMessage{V: RewardVersion, Task: t}) // strings and an int: cannot fail
	return b
}

// DecodeTask parses a reward message value; anything else is ErrBadTask.
func DecodeTask(value []byte) (Task, error) {
	var m rewardMessage
	if err := strictjson.Decode(value, &m); err != nil {
		return Task{}, fmt.Errorf("%w: %w", ErrBadTask, err)
	}
	if m.V != RewardVersion {
		return Task{}, fmt.Errorf("%w: format version %d, want %d", ErrBadTask, m.V, RewardVersion)
	}
	return m.Task, m.Task.validate()
}

func (t Task) validate() error {
	if err := validUser(t.User); err != nil {
		return fmt.Errorf("%w: %w", ErrBadTask, err)
	}
	if _, err := ParseDate(t.Date); err != nil {
		return fmt.Errorf("%w: date: %w", ErrBadTask, err)
	}
	if t.Kind != "daily" && t.Kind != "bonus" {
		return fmt.Errorf("%w: kind %q", ErrBadTask, t.Kind)
	}
	if t.Points < 0 {
		return fmt.Errorf("%w: %d points", ErrBadTask, t.Points)
	}
	return nil
}

// Ledger grants reward tasks exactly once into SQL: a ledger row unique per
// (user, date, kind) and the user's balance, in one transaction. A task
// delivered twice, replayed, or handled by two consumers at once finds the
// row taken and grants nothing the second time.
type Ledger struct {
	db  *sqlx.DB
	obs *ledgerInstruments
}

// NewLedger returns a ledger on db (MySQL 8 / MariaDB 10.6+ through the
// "mysql" driver, or SQLite through "sqlite", whose pool it limits to one
// connection); Migrate creates its tables.
func NewLedger(db *sqlx.DB, opts ...LedgerOption) (*Ledger, error) {
	if err := sqlutil.Check(db, "signin"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var o ledgerOptions
	for _, opt := range opts {
		opt(&o)
	}
	return &Ledger{db: db, obs: newLedgerInstruments(o.mp, o.tp)}, nil
}

// LedgerOption configures a Ledger.
type LedgerOption func(*ledgerOptions)

type ledgerOptions struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// LedgerMeterProvider sends the Ledger's metrics to mp (default the global
// provider).
func LedgerMeterProvider(mp metric.MeterProvider) LedgerOption {
	return func(o *ledgerOptions) { o.mp = mp }
}

// LedgerTracerProvider sends the Ledger's spans to tp (default the global
// provider).
func LedgerTracerProvider(tp trace.TracerProvider) LedgerOption {
	return func(o *ledgerOptions) { o.tp = tp }
}

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

// Grant applies t once; granted is false when it was applied before. An
// invalid task is ErrBadTask and writes nothing.
func (l *Ledger) Grant(ctx context.Context, t Task) (granted bool, err error) {
	ctx, call := l.obs.grant.Start(ctx)
	granted, err = l.grant(ctx, t)
	if err == nil && !granted {
		call.End(errAlreadyGranted) // counted as a refusal; the caller gets the idempotent answer
		return false, nil
	}
	return granted, call.End(err)
}

func (l *Ledger) grant(ctx context.Context, t Task) (granted bool, err error) {
	if err := t.validate(); err != nil {
		return false, err
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

// Handle is the outbox.Handler of the reward topic: it grants the message's
// task once. A message that is not a valid reward task is ErrBadTask marked
// outbox.ErrPoison, so consumers skip or dead-letter it instead of blocking
// the rewards behind it; database errors are returned for a retry.
func (l *Ledger) Handle(ctx context.Context, _, value []byte) error {
	ctx, call := l.obs.handle.Start(ctx)
	t, err := DecodeTask(value)
	if err == nil {
		_, err = l.grant(ctx, t)
	}
	if errors.Is(err, ErrBadTask) {
		err = outbox.Poison(err)
	}
	return call.End(err)
}

// Balance returns user's granted points.
func (l *Ledger) Balance(ctx context.Context, user string) (int64, error) {
	ctx, call := l.obs.balance.Start(ctx)
	var n int64
	err := l.db.GetContext(ctx, &n, `SELECT COALESCE(SUM(points), 0) FROM signin_balance WHERE user_id = ?`, user)
	return n, call.End(err)
}

// Entries returns how many ledger rows user has.
func (l *Ledger) Entries(ctx context.Context, user string) (int, error) {
	ctx, call := l.obs.entries.Start(ctx)
	var n int
	err := l.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM signin_ledger WHERE user_id = ?`, user)
	return n, call.End(err)
}
