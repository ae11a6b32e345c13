package shortlink

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// The owner index: which links an owner has, newest first, for List.
//
// It lives in tables of its own, links_owner_000 … (as many as the link
// tables, over the same databases), sharded by the owner — all of an
// owner's rows in one table — while a link lives in its code's table, so
// the index row and its link are usually in different tables and often in
// different databases: no transaction covers both. The rules that keep a
// listing honest without one:
//
//   - An index row is written (or its written_at refreshed) before the link
//     change that wants it commits: Shorten writes the link's rows before
//     inserting the link, Update a tag's row before committing the tag.
//   - A listing shows an index row only if the link, read from SQL after the
//     row, exists with that owner, that created_at and (for a tag row) that
//     tag. A row whose link is missing, owned by someone else, made again
//     later or no longer tagged so is invisible: a listing never shows what
//     is not there, and a created link always appears.
//   - An index row is deleted only when it was last written more than
//     indexGrace ago (Delete, an Update dropping a tag, and List meeting an
//     invisible row, which cleans it up): a row written for a change still
//     on its way to commit is never taken away from under it, as long as
//     that change commits within indexGrace of writing the row.
//
// Unowned links (Options.Owner "") are not indexed: they would all fall in
// one table.

// ownersTable is the owner index's logical table name.
const ownersTable = "links_owner"

// indexGrace is how long an index row is kept after its last write even
// when no link wants it (see above).
const indexGrace = time.Minute

// ownersDDL is one table of the owner index: a row per link of an owner
// with the empty tag (every link), and one per tag of the link.
func ownersDDL(mysql bool, code string) string {
	owner, tag := "VARCHAR(128)", "VARCHAR(64)"
	if mysql {
		owner, tag = "VARBINARY(128)", "VARBINARY(64)"
	}
	return `CREATE TABLE IF NOT EXISTS {{table}} (
	owner      ` + owner + ` NOT NULL,
	tag        ` + tag + ` NOT NULL,
	created_at BIGINT NOT NULL,
	code       ` + code + ` NOT NULL,
	written_at BIGINT NOT NULL,
	PRIMARY KEY (owner, tag, created_at, code)
)`
}

// ownersFilled names the meta row that says the index was filled from the
// links that existed when it was made.
const ownersFilled = "owner_index_filled"

// migrateOwnerIndex makes the index tables and, the first time, fills them
// from every link table.
func (s *Service) migrateOwnerIndex(ctx context.Context) error {
	db := s.router.All()[0].DB
	if err := s.owners.CreateTables(ctx, ownersDDL(sqlutil.IsMySQL(db), sqlutil.BinaryKey(db, maxAlias))); err != nil {
		return err
	}
	var n int
	if err := db.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+metaTable+" WHERE name = ?", ownersFilled); err != nil {
		return fmt.Errorf("shortlink: read %s: %w", metaTable, err)
	}
	if n > 0 {
		return nil
	}
	for _, sh := range s.router.All() {
		if err := s.fillOwnerIndex(ctx, sh); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, "INSERT INTO "+metaTable+" (name, value) VALUES (?, ?)", ownersFilled, "1")
	if err != nil && !sqlutil.IsDuplicate(err) {
		return fmt.Errorf("shortlink: mark the owner index filled: %w", err)
	}
	return nil
}

// fillOwnerIndex indexes the owned links of one link table, 500 at a time.
func (s *Service) fillOwnerIndex(ctx context.Context, sh shard.Shard) error {
	after := ""
	for {
		var rows []row
		err := sh.DB.SelectContext(ctx, &rows, "SELECT "+rowColumns+" FROM "+sh.Table+" WHERE code > ? AND owner <> '' ORDER BY code LIMIT 500", after)
		if err != nil {
			return fmt.Errorf("shortlink: fill the owner index from %s: %w", sh.Table, err)
		}
		for _, r := range rows {
			l := s.linkOf(r)
			if err := s.indexLink(ctx, l, indexTags(l)); err != nil {
				return err
			}
		}
		if len(rows) < 500 {
			return nil
		}
		after = rows[len(rows)-1].Code
	}
}

// indexTags are the index rows' tags of l: the empty tag (every link) and its tags.
func indexTags(l *Link) []string { return append([]string{""}, l.Tags...) }

// added returns the tags of to that from lacks.
func added(from, to []string) []string {
	var a []string
	for _, t := range to {
		if !slices.Contains(from, t) {
			a = append(a, t)
		}
	}
	return a
}

// indexLink writes (or refreshes) l's index rows of tags, in one statement.
func (s *Service) indexLink(ctx context.Context, l *Link, tags []string) error {
	if l.Owner == "" || len(tags) == 0 {
		return nil
	}
	sh := s.owners.ByKey(l.Owner)
	now := s.cfg.Now().UnixMilli()
	var q strings.Builder
	q.WriteString("INSERT INTO " + sh.Table + " (owner, tag, created_at, code, written_at) VALUES ")
	args := make([]any, 0, 5*len(tags))
	for i, tag := range tags {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?)")
		args = append(args, l.Owner, tag, l.CreatedAt.UnixMilli(), s.keyOf(l), now)
	}
	if sqlutil.IsMySQL(sh.DB) {
		q.WriteString(" ON DUPLICATE KEY UPDATE written_at = VALUES(written_at)")
	} else {
		q.WriteString(" ON CONFLICT (owner, tag, created_at, code) DO UPDATE SET written_at = excluded.written_at")
	}
	if _, err := sh.DB.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("shortlink: write the owner index %s: %w", sh.Table, err)
	}
	return nil
}

// unindexLink deletes l's index rows of tags that were last written more
// than indexGrace ago. It is a clean-up — a row left behind is invisible —
// so a failure goes to OnError, not to the caller.
func (s *Service) unindexLink(ctx context.Context, l *Link, tags []string) {
	if l.Owner == "" || len(tags) == 0 {
		return
	}
	sh := s.owners.ByKey(l.Owner)
	q := "DELETE FROM " + sh.Table + " WHERE owner = ? AND tag IN (?" + strings.Repeat(", ?", len(tags)-1) + ") AND created_at = ? AND code = ? AND written_at < ?"
	args := []any{l.Owner}
	for _, t := range tags {
		args = append(args, t)
	}
	args = append(args, l.CreatedAt.UnixMilli(), s.keyOf(l), s.cfg.Now().Add(-indexGrace).UnixMilli())
	if _, err := sh.DB.ExecContext(ctx, q, args...); err != nil {
		s.cfg.OnError(fmt.Errorf("shortlink: clean the owner index %s: %w", sh.Table, err))
	}
}

// ErrInvalidCursor wraps ErrInvalidOptions for a List cursor this
// deployment did not issue for that owner and filter (garbled, forged, or
// another listing's).
var ErrInvalidCursor = fmt.Errorf("%w: invalid cursor", ErrInvalidOptions)

// ListFilter narrows List.
type ListFilter struct {
	// Tag, when not "", lists only the links with this tag (normalised as
	// Options.Tags are).
	Tag string
}

// Page sizes of List.
const (
	DefaultListPage = 20
	MaxListPage     = 100
)

// maxListRounds bounds the index reads of one List page that meets
// invisible index rows.
const maxListRounds = 4

// List returns owner's links, newest first (by CreatedAt, then code), at
// most n of them (0: DefaultListPage; at most MaxListPage), with f.Tag only
// those with that tag, and the cursor of the next page ("" after the last
// page). Pass "" as cursor for the first page. A cursor is opaque and
// signed: one List did not issue for this owner and filter is
// ErrInvalidCursor. Paging is by position, so a link made while an owner
// pages appears on no page already read and at most once; each link that
// exists throughout appears exactly once. Links are read from SQL, as they
// are at the time of the call (expired links included), never from a
// cache. An owner of "" is ErrInvalidOptions: unowned links are not
// indexed.
//
// Cost: one range query on the owner's index table reading at most n+1
// rows by its primary key, then one query per database holding any of
// those links (their tables' point reads by primary key, joined by UNION
// ALL) — with one database, two queries and at most 2(n+1) rows. Invisible
// index rows (see "Owner index" in the package documentation) cost further
// rounds of the two, at most 4 in all (each reading at most n+1 rows of
// each), and a DELETE each once they are a minute old; a page
// that used its rounds up may hold fewer than n links and still have a next
// cursor, and the last page may be empty. The first List of a process also
// reads the cursor key (one or two queries).
func (s *Service) List(ctx context.Context, owner string, f ListFilter, cursor string, n int) ([]*Link, string, error) {
	ctx, call := s.obs.list.Start(ctx)
	page, next, err := s.list(ctx, owner, f, cursor, n)
	return page, next, call.End(err)
}

func (s *Service) list(ctx context.Context, owner string, f ListFilter, cursor string, n int) ([]*Link, string, error) {
	if s.closed.Load() {
		return nil, "", ErrClosed
	}
	if n == 0 {
		n = DefaultListPage
	}
	switch {
	case owner == "" || !validOwner(owner):
		return nil, "", fmt.Errorf("%w: List needs an owner (at most %d bytes of UTF-8, no control characters)", ErrInvalidOptions, MaxOwner)
	case n < 1 || n > MaxListPage:
		return nil, "", fmt.Errorf("%w: page size %d outside 1..%d", ErrInvalidOptions, n, MaxListPage)
	}
	tag := f.Tag
	if tag != "" {
		var err error
		if tag, err = normalizeTag(tag); err != nil {
			return nil, "", err
		}
	}
	key, err := s.listKey(ctx)
	if err != nil {
		return nil, "", err
	}
	pos := position{CreatedAt: math.MaxInt64}
	if cursor != "" {
		if pos, err = decodeCursor(key, owner, tag, cursor); err != nil {
			return nil, "", err
		}
	}
	sh := s.owners.ByKey(owner)
	stale := s.cfg.Now().Add(-indexGrace).UnixMilli()
	var page []*Link
	last := pos // the position of the last link on the page
	for range maxListRounds {
		var rows []indexRow
		err := sh.DB.SelectContext(ctx, &rows, "SELECT created_at, code, written_at FROM "+sh.Table+
			" WHERE owner = ? AND tag = ? AND (created_at < ? OR (created_at = ? AND code < ?)) ORDER BY created_at DESC, code DESC LIMIT ?",
			owner, tag, pos.CreatedAt, pos.CreatedAt, pos.Code, n+1)
		if err != nil {
			return nil, "", fmt.Errorf("shortlink: read the owner index %s: %w", sh.Table, err)
		}
		links, err := s.loadMany(ctx, rows)
		if err != nil {
			return nil, "", err
		}
		for _, r := range rows {
			if len(page) == n { // a row after the page's last: there may be more
				return page, encodeCursor(key, owner, tag, last), nil
			}
			pos = position{CreatedAt: r.CreatedAt, Code: r.Code}
			l, ok := links[r.Code]
			if ok && l.Owner == owner && l.CreatedAt.UnixMilli() == r.CreatedAt && (tag == "" || slices.Contains(l.Tags, tag)) {
				page, last = append(page, l), pos
				continue
			}
			if r.WrittenAt < stale {
				s.dropIndexRow(ctx, sh, owner, tag, r, stale)
			}
		}
		if len(rows) < n+1 {
			return page, "", nil
		}
	}
	return page, encodeCursor(key, owner, tag, pos), nil
}

type indexRow struct {
	CreatedAt int64  `db:"created_at"`
	Code      string `db:"code"`
	WrittenAt int64  `db:"written_at"`
}

// dropIndexRow deletes an invisible index row unless it was written again
// since it was read.
func (s *Service) dropIndexRow(ctx context.Context, sh shard.Shard, owner, tag string, r indexRow, stale int64) {
	_, err := sh.DB.ExecContext(ctx, "DELETE FROM "+sh.Table+" WHERE owner = ? AND tag = ? AND created_at = ? AND code = ? AND written_at < ?",
		owner, tag, r.CreatedAt, r.Code, stale)
	if err != nil {
		s.cfg.OnError(fmt.Errorf("shortlink: clean the owner index %s: %w", sh.Table, err))
	}
}

// loadMany reads the links of rows from SQL: per database one query, the
// point reads of its tables joined by UNION ALL; databases in parallel.
func (s *Service) loadMany(ctx context.Context, rows []indexRow) (map[string]*Link, error) {
	byDB := map[int]map[string][]string{} // database → table → codes
	seen := map[string]bool{}
	var dbs []shard.Shard
	for _, r := range rows {
		if seen[r.Code] {
			continue
		}
		seen[r.Code] = true
		sh := s.router.ByKey(r.Code)
		if byDB[sh.DBIndex] == nil {
			byDB[sh.DBIndex] = map[string][]string{}
			dbs = append(dbs, sh)
		}
		byDB[sh.DBIndex][sh.Table] = append(byDB[sh.DBIndex][sh.Table], r.Code)
	}
	links := make(map[string]*Link, len(seen))
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	for _, db := range dbs {
		g.Go(func() error {
			var q strings.Builder
			var args []any
			tables := byDB[db.DBIndex]
			names := make([]string, 0, len(tables))
			for t := range tables {
				names = append(names, t)
			}
			slices.Sort(names)
			for i, t := range names {
				if i > 0 {
					q.WriteString(" UNION ALL ")
				}
				codes := tables[t]
				q.WriteString("SELECT " + rowColumns + " FROM " + t + " WHERE code IN (?" + strings.Repeat(", ?", len(codes)-1) + ")")
				for _, c := range codes {
					args = append(args, c)
				}
			}
			var got []row
			if err := db.DB.SelectContext(ctx, &got, q.String(), args...); err != nil {
				return fmt.Errorf("shortlink: read listed links: %w", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range got {
				links[r.Code] = s.linkOf(r)
			}
			return nil
		})
	}
	return links, g.Wait()
}

// position is a place in an owner's listing: before the link made at
// CreatedAt (Unix ms) with Code.
type position struct {
	CreatedAt int64
	Code      string
}

// listKey returns the deployment's cursor key, stored in SQL on first use.
func (s *Service) listKey(ctx context.Context) ([]byte, error) {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	if s.cursorKey == nil {
		v, err := s.storedSecret(ctx, "list_cursor_key")
		if err != nil {
			return nil, err
		}
		s.cursorKey = []byte(v)
	}
	return s.cursorKey, nil
}

// cursorVersion opens every cursor, so that a later format can be told.
const cursorVersion = 1

// cursorMAC is the length of a cursor's truncated HMAC-SHA256.
const cursorMAC = 16

// encodeCursor is base64url of the version, the position (8 bytes of
// created_at, then the code) and an HMAC of them with the owner and tag.
func encodeCursor(key []byte, owner, tag string, p position) string {
	b := make([]byte, 0, 1+8+len(p.Code)+cursorMAC)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(p.CreatedAt))
	b = append(b, p.Code...)
	b = append(b, cursorSum(key, owner, tag, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(key []byte, owner, tag, cursor string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < 1+8+cursorMAC || len(b) > 1+8+maxAlias+cursorMAC || b[0] != cursorVersion {
		return position{}, ErrInvalidCursor
	}
	body, sum := b[:len(b)-cursorMAC], b[len(b)-cursorMAC:]
	if !hmac.Equal(sum, cursorSum(key, owner, tag, body)) {
		return position{}, ErrInvalidCursor
	}
	return position{CreatedAt: int64(binary.BigEndian.Uint64(body[1:9])), Code: string(body[9:])}, nil
}

func cursorSum(key []byte, owner, tag string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(owner))
	m.Write([]byte{0})
	m.Write([]byte(tag))
	m.Write([]byte{0})
	m.Write(body)
	return m.Sum(nil)[:cursorMAC]
}
