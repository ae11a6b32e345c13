package shortlink

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// errDuplicate: the code is already a row.
var errDuplicate = errors.New("shortlink: duplicate code")

// linksDDL is one link table. Times are Unix milliseconds (0: none), which
// reads the same on MySQL and SQLite. About 300 bytes a row with a typical
// URL, as the seed estimates.
func linksDDL(db *sqlx.DB) string {
	return `CREATE TABLE IF NOT EXISTS {{table}} (
	code       ` + sqlutil.BinaryKey(db, maxAlias) + ` NOT NULL PRIMARY KEY,
	long_url   VARCHAR(2048) NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL DEFAULT 0,
	max_visits BIGINT NOT NULL DEFAULT 0,
	redirect   SMALLINT NOT NULL DEFAULT 0,
	clicks     BIGINT NOT NULL DEFAULT 0,
	` + ownerColumn(db) + `
)`
}

// ownerColumn is the links' owner, compared byte for byte (on MySQL a
// binary string: a text column's default collation there would make
// "Alice" and "alice " the owner "alice"); Migrate adds it to tables made
// before it existed.
func ownerColumn(db *sqlx.DB) string {
	if sqlutil.IsMySQL(db) {
		return "owner VARBINARY(128) NOT NULL DEFAULT ''"
	}
	return "owner VARCHAR(128) NOT NULL DEFAULT ''"
}

// addOwnerColumns adds the owner column to every link table that lacks
// it (made by an earlier version); tables that have it are left alone.
func (s *Service) addOwnerColumns(ctx context.Context) error {
	for _, sh := range s.router.All() {
		if _, err := sh.DB.ExecContext(ctx, "SELECT owner FROM "+sh.Table+" WHERE 1 = 0"); err == nil {
			continue
		}
		if _, err := sh.DB.ExecContext(ctx, "ALTER TABLE "+sh.Table+" ADD COLUMN "+ownerColumn(sh.DB)); err != nil {
			if _, again := sh.DB.ExecContext(ctx, "SELECT owner FROM "+sh.Table+" WHERE 1 = 0"); again == nil {
				continue // another process added it meanwhile
			}
			return fmt.Errorf("shortlink: add the owner column to %s: %w", sh.Table, err)
		}
	}
	return nil
}

type row struct {
	Code      string `db:"code"`
	URL       string `db:"long_url"`
	CreatedAt int64  `db:"created_at"`
	ExpiresAt int64  `db:"expires_at"`
	MaxVisits int64  `db:"max_visits"`
	Redirect  int    `db:"redirect"`
	Clicks    int64  `db:"clicks"`
	Owner     string `db:"owner"`
}

func (r row) link() *Link {
	l := &Link{Code: r.Code, URL: r.URL, CreatedAt: time.UnixMilli(r.CreatedAt), MaxVisits: r.MaxVisits, Redirect: r.Redirect, Owner: r.Owner}
	if r.ExpiresAt > 0 {
		l.ExpiresAt = time.UnixMilli(r.ExpiresAt)
	}
	return l
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// insert stores l in its code's table; errDuplicate if the code exists. The
// code's table is fixed by the code, so the primary key makes codes unique
// across all tables, concurrent inserts included.
func (s *Service) insert(ctx context.Context, l *Link) error {
	sh := s.router.ByKey(l.Code)
	_, err := sh.DB.ExecContext(ctx, "INSERT INTO "+sh.Table+
		" (code, long_url, created_at, expires_at, max_visits, redirect, owner) VALUES (?, ?, ?, ?, ?, ?, ?)",
		l.Code, l.URL, unixMilli(l.CreatedAt), unixMilli(l.ExpiresAt), l.MaxVisits, l.Redirect, l.Owner)
	if sqlutil.IsDuplicate(err) {
		return errDuplicate
	}
	if err != nil {
		return fmt.Errorf("shortlink: insert into %s: %w", sh.Table, err)
	}
	return nil
}

func (s *Service) load(ctx context.Context, code string) (row, error) {
	sh := s.router.ByKey(code)
	var r row
	err := sh.DB.GetContext(ctx, &r, "SELECT code, long_url, created_at, expires_at, max_visits, redirect, clicks, owner FROM "+sh.Table+" WHERE code = ?", code)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, ErrNotFound
	}
	if err != nil {
		return row{}, fmt.Errorf("shortlink: read %s: %w", sh.Table, err)
	}
	return r, nil
}

// remove deletes code's row; with owned, only if owner owns it (else
// ErrNotFound, as for a code that does not exist).
func (s *Service) remove(ctx context.Context, code string, owned bool, owner string) error {
	sh := s.router.ByKey(code)
	q, args := "DELETE FROM "+sh.Table+" WHERE code = ?", []any{code}
	if owned {
		q, args = q+" AND owner = ?", append(args, owner)
	}
	res, err := sh.DB.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("shortlink: delete from %s: %w", sh.Table, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// storedClicks reads code's flushed clicks; with owned, only if owner owns
// it (else ErrNotFound).
func (s *Service) storedClicks(ctx context.Context, code string, owned bool, owner string) (int64, error) {
	r, err := s.load(ctx, code)
	if err == nil && owned && r.Owner != owner {
		return 0, ErrNotFound
	}
	return r.Clicks, err
}

// addClicks adds counted clicks, one UPDATE per code per flush — never one per
// redirect, which would serialise a hot link on its row lock.
func (s *Service) addClicks(ctx context.Context, counts map[string]int64) error {
	var errs []error
	for code, n := range counts {
		sh := s.router.ByKey(code)
		if _, err := sh.DB.ExecContext(ctx, "UPDATE "+sh.Table+" SET clicks = clicks + ? WHERE code = ?", n, code); err != nil {
			errs = append(errs, fmt.Errorf("shortlink: count clicks of %s: %w", code, err))
			continue
		}
		delete(counts, code)
	}
	return errors.Join(errs...)
}

// metaTable holds per-namespace settings the processes of a deployment must
// share: the code key.
const metaTable = "shortlink_meta"

func (s *Service) createMeta(ctx context.Context) error {
	db := s.router.All()[0].DB
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+metaTable+` (
	name  VARCHAR(255) NOT NULL PRIMARY KEY,
	value VARCHAR(255) NOT NULL
)`)
	if err != nil {
		return fmt.Errorf("shortlink: create %s: %w", metaTable, err)
	}
	return nil
}

// storedCodeKey returns the namespace's code key. The first call in a
// namespace offers a random key; of processes offering at once the primary
// key lets exactly one insert win, and everyone reads that one back.
func (s *Service) storedCodeKey(ctx context.Context) (uint64, error) {
	db := s.router.All()[0].DB
	name := keys.Join(s.cfg.Namespace, "code_key")
	_, err := db.ExecContext(ctx, "INSERT INTO "+metaTable+" (name, value) VALUES (?, ?)", name, strconv.FormatUint(randomKey(), 10))
	if err != nil && !sqlutil.IsDuplicate(err) {
		return 0, fmt.Errorf("shortlink: store code key: %w", err)
	}
	var v string
	if err := db.GetContext(ctx, &v, "SELECT value FROM "+metaTable+" WHERE name = ?", name); err != nil {
		return 0, fmt.Errorf("shortlink: read code key: %w", err)
	}
	key, err := strconv.ParseUint(v, 10, 64)
	if err != nil || key == 0 {
		return 0, fmt.Errorf("shortlink: stored code key %q is not a non-zero uint64", v)
	}
	return key, nil
}

// randomKey is a secret, non-zero permutation key.
func randomKey() uint64 {
	for {
		var b [8]byte
		rand.Read(b[:])
		if k := binary.LittleEndian.Uint64(b[:]); k != 0 {
			return k
		}
	}
}
