package shortlink

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	` + ownerColumn(db) + `,
	` + versionColumn + `,
	tags       ` + tagsColumnType(sqlutil.IsMySQL(db)) + `
)`
}

// versionColumn counts a link's edits (1: never edited); Migrate adds it
// to tables made before it existed, their links at version 1.
const versionColumn = "version BIGINT NOT NULL DEFAULT 1"

// historyDDL is the history of one link table's links, one row per edit,
// beside the table in the same database so that an edit writes the link
// and its revision in one local transaction, and sharded as the links are.
func historyDDL(db *sqlx.DB) string {
	return `CREATE TABLE IF NOT EXISTS {{table}}` + historySuffix + ` (
	code           ` + sqlutil.BinaryKey(db, maxAlias) + ` NOT NULL,
	version        BIGINT NOT NULL,
	` + strings.Replace(ownerColumn(db), "owner", "actor", 1) + `,
	edited_at      BIGINT NOT NULL,
	old_url        VARCHAR(2048) NOT NULL,
	new_url        VARCHAR(2048) NOT NULL,
	old_expires_at BIGINT NOT NULL,
	new_expires_at BIGINT NOT NULL,
	old_max_visits BIGINT NOT NULL,
	new_max_visits BIGINT NOT NULL,
	old_redirect   SMALLINT NOT NULL,
	new_redirect   SMALLINT NOT NULL,
	old_tags       ` + tagsColumnType(sqlutil.IsMySQL(db)) + `,
	new_tags       ` + tagsColumnType(sqlutil.IsMySQL(db)) + `,
	PRIMARY KEY (code, version)
)`
}

const historySuffix = "_history"

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

// addColumn adds the column name, defined by def, to every link table (or,
// with a suffix, every table beside one, such as its history) that lacks it
// (made by an earlier version); tables that have it are left alone.
func (s *Service) addColumn(ctx context.Context, suffix, name, def string) error {
	for _, sh := range s.router.All() {
		table := sh.Table + suffix
		if _, err := sh.DB.ExecContext(ctx, "SELECT "+name+" FROM "+table+" WHERE 1 = 0"); err == nil {
			continue
		}
		if _, err := sh.DB.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN "+def); err != nil {
			if _, again := sh.DB.ExecContext(ctx, "SELECT "+name+" FROM "+table+" WHERE 1 = 0"); again == nil {
				continue // another process added it meanwhile
			}
			return fmt.Errorf("shortlink: add the %s column to %s: %w", name, table, err)
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
	Version   int64  `db:"version"`
	Tags      string `db:"tags"`
}

// rowColumns are the columns of a row, in load's order.
const rowColumns = "code, long_url, created_at, expires_at, max_visits, redirect, clicks, owner, version, tags"

func (r row) link() *Link {
	l := &Link{Code: r.Code, URL: r.URL, CreatedAt: time.UnixMilli(r.CreatedAt), MaxVisits: r.MaxVisits, Redirect: r.Redirect, Owner: r.Owner, Version: r.Version, Tags: splitTags(r.Tags)}
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
	key := s.keyOf(l)
	sh := s.router.ByKey(key)
	_, err := sh.DB.ExecContext(ctx, "INSERT INTO "+sh.Table+
		" (code, long_url, created_at, expires_at, max_visits, redirect, owner, version, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		key, l.URL, unixMilli(l.CreatedAt), unixMilli(l.ExpiresAt), l.MaxVisits, l.Redirect, l.Owner, l.Version, joinTags(l.Tags))
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
	err := sh.DB.GetContext(ctx, &r, "SELECT "+rowColumns+" FROM "+sh.Table+" WHERE code = ?", code)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, ErrNotFound
	}
	if err != nil {
		return row{}, fmt.Errorf("shortlink: read %s: %w", sh.Table, err)
	}
	return r, nil
}

// remove deletes code's row, its history and its analytics rollups and
// returns the row as it was; with owned, only if owner owns it (else
// ErrNotFound, as for a code that does not exist).
func (s *Service) remove(ctx context.Context, code string, owned bool, owner string) (row, error) {
	sh := s.router.ByKey(code)
	var r row
	err := sqlutil.InTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		err := tx.GetContext(ctx, &r, "SELECT "+rowColumns+" FROM "+sh.Table+" WHERE code = ?", code)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && owned && r.Owner != owner) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("shortlink: read %s: %w", sh.Table, err)
		}
		// An edit committing in between may have changed the tags read: an
		// index row it added outlives the link, invisible (see ownerindex.go).
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+sh.Table+" WHERE code = ?", code); err != nil {
			return fmt.Errorf("shortlink: delete from %s: %w", sh.Table, err)
		}
		// A code made again later starts a new history at version 1.
		for _, t := range []string{historySuffix, clicksSuffix} {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+sh.Table+t+" WHERE code = ?", code); err != nil {
				return fmt.Errorf("shortlink: delete from %s%s: %w", sh.Table, t, err)
			}
		}
		return nil
	})
	return r, err
}

// errRaced: another edit changed the link between its read and its update.
var errRaced = errors.New("shortlink: edit raced")

// commitEdit writes rev's new settings to its link, if the link is still at
// the version before rev (else errRaced), and rev to the history, in one
// transaction.
func (s *Service) commitEdit(ctx context.Context, rev Revision) error {
	key := s.Key(rev.Domain, rev.Code)
	sh := s.router.ByKey(key)
	a, b := rev.After, rev.Before
	return sqlutil.InTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE "+sh.Table+" SET long_url = ?, expires_at = ?, max_visits = ?, redirect = ?, tags = ?, version = ? WHERE code = ? AND version = ?",
			a.URL, unixMilli(a.ExpiresAt), a.MaxVisits, a.Redirect, joinTags(a.Tags), rev.Version, key, rev.Version-1)
		if err != nil {
			return fmt.Errorf("shortlink: update %s: %w", sh.Table, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(errRaced, err)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO "+sh.Table+historySuffix+
			" (code, version, actor, edited_at, old_url, new_url, old_expires_at, new_expires_at, old_max_visits, new_max_visits, old_redirect, new_redirect, old_tags, new_tags)"+
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			key, rev.Version, rev.Actor, unixMilli(rev.At), b.URL, a.URL, unixMilli(b.ExpiresAt), unixMilli(a.ExpiresAt), b.MaxVisits, a.MaxVisits, b.Redirect, a.Redirect, joinTags(b.Tags), joinTags(a.Tags))
		if err != nil {
			return fmt.Errorf("shortlink: insert into %s%s: %w", sh.Table, historySuffix, err)
		}
		return nil
	})
}

type revisionRow struct {
	Version      int64  `db:"version"`
	Actor        string `db:"actor"`
	At           int64  `db:"edited_at"`
	OldURL       string `db:"old_url"`
	NewURL       string `db:"new_url"`
	OldExpiresAt int64  `db:"old_expires_at"`
	NewExpiresAt int64  `db:"new_expires_at"`
	OldMaxVisits int64  `db:"old_max_visits"`
	NewMaxVisits int64  `db:"new_max_visits"`
	OldRedirect  int    `db:"old_redirect"`
	NewRedirect  int    `db:"new_redirect"`
	OldTags      string `db:"old_tags"`
	NewTags      string `db:"new_tags"`
}

func fromMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// revisions reads at most limit of code's revisions older than version
// before, newest first.
func (s *Service) revisions(ctx context.Context, code string, before int64, limit int) ([]Revision, error) {
	sh := s.router.ByKey(code)
	var rows []revisionRow
	err := sh.DB.SelectContext(ctx, &rows, "SELECT version, actor, edited_at, old_url, new_url, old_expires_at, new_expires_at, old_max_visits, new_max_visits, old_redirect, new_redirect, old_tags, new_tags FROM "+
		sh.Table+historySuffix+" WHERE code = ? AND version < ? ORDER BY version DESC LIMIT ?", code, before, limit)
	if err != nil {
		return nil, fmt.Errorf("shortlink: read %s%s: %w", sh.Table, historySuffix, err)
	}
	revs := make([]Revision, len(rows))
	c, domain := s.split(code)
	for i, r := range rows {
		rev := Revision{Code: c, Domain: domain, Version: r.Version, Actor: r.Actor, At: time.UnixMilli(r.At),
			Before: Settings{URL: r.OldURL, ExpiresAt: fromMilli(r.OldExpiresAt), MaxVisits: r.OldMaxVisits, Redirect: r.OldRedirect, Tags: splitTags(r.OldTags)},
			After:  Settings{URL: r.NewURL, ExpiresAt: fromMilli(r.NewExpiresAt), MaxVisits: r.NewMaxVisits, Redirect: r.NewRedirect, Tags: splitTags(r.NewTags)}}
		rev.Changed = rev.Before.changed(rev.After)
		revs[i] = rev
	}
	return revs, nil
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

// storedCodeKey returns the namespace's code key.
func (s *Service) storedCodeKey(ctx context.Context) (uint64, error) {
	v, err := s.storedSecret(ctx, keys.Join(s.cfg.Namespace, "code_key"))
	if err != nil {
		return 0, err
	}
	key, err := strconv.ParseUint(v, 10, 64)
	if err != nil || key == 0 {
		return 0, fmt.Errorf("shortlink: stored code key %q is not a non-zero uint64", v)
	}
	return key, nil
}

// storedSecret returns the random secret stored under name. The first call
// offers a random value; of processes offering at once the primary key lets
// exactly one insert win, and everyone reads that one back.
func (s *Service) storedSecret(ctx context.Context, name string) (string, error) {
	db := s.router.All()[0].DB
	_, err := db.ExecContext(ctx, "INSERT INTO "+metaTable+" (name, value) VALUES (?, ?)", name, strconv.FormatUint(randomKey(), 10))
	if err != nil && !sqlutil.IsDuplicate(err) {
		return "", fmt.Errorf("shortlink: store %s: %w", name, err)
	}
	var v string
	if err := db.GetContext(ctx, &v, "SELECT value FROM "+metaTable+" WHERE name = ?", name); err != nil {
		return "", fmt.Errorf("shortlink: read %s: %w", name, err)
	}
	return v, nil
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
