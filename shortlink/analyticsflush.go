package shortlink

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// How long a shard remembers the batches it applied, and how long a batch
// that keeps failing is tried again: less, so that every retry meets the
// record of an earlier commit and is refused.
const (
	appliedKeep = 7 * 24 * time.Hour
	maxBatchAge = 24 * time.Hour
	pruneEvery  = time.Hour // how often a process prunes a shard's applied batches
)

// The periods a rollup row counts.
const (
	periodHour = 1
	periodDay  = 2
)

const (
	clicksSuffix  = "_clicks"
	appliedSuffix = "_batches"
)

// clicksDDL holds one link table's rollups: per link, per hour and per UTC
// day (period), per dimension (dim: 0 the total, 1.. a Dimension), per
// value, people (bot 0) and bots (bot 1) apart. bucket is the period's
// start in Unix seconds. Beside the link table, sharded as it is.
func clicksDDL(db *sqlx.DB) string {
	value := "VARCHAR(64)"
	if sqlutil.IsMySQL(db) {
		value = "VARBINARY(64)" // compared byte for byte, as in memory
	}
	return `CREATE TABLE IF NOT EXISTS {{table}}` + clicksSuffix + ` (
	code   ` + sqlutil.BinaryKey(db, maxAlias) + ` NOT NULL,
	period SMALLINT NOT NULL,
	dim    SMALLINT NOT NULL,
	bucket BIGINT NOT NULL,
	bot    SMALLINT NOT NULL,
	value  ` + value + ` NOT NULL,
	n      BIGINT NOT NULL,
	PRIMARY KEY (code, period, dim, bucket, bot, value)
)`
}

// appliedDDL records the batches a shard applied. A batch id begins with
// its making time (16 hex digits of Unix milliseconds), so the primary
// key's order is the pruning order.
func appliedDDL(db *sqlx.DB) string {
	return `CREATE TABLE IF NOT EXISTS {{table}}` + appliedSuffix + ` (
	batch_id ` + sqlutil.BinaryKey(db, 32) + ` NOT NULL PRIMARY KEY
)`
}

// cutSize is the size of a cut batch: link tables (transactions), rows
// and HyperLogLog keys.
type cutSize struct{ parts, rows, keys int }

// countRow is one rollup row's increment.
type countRow struct {
	code   string
	period int
	dim    int
	bucket int64
	bot    int
	value  string
	n      int64
}

// part is the rows of one batch for one link table: one transaction.
type part struct {
	sh   shard.Shard
	rows []countRow
}

// batch is a rollup cut for writing. Once cut it never changes but by
// losing the parts written, so a retry writes the very same counts under
// the same id.
type batch struct {
	id      string
	made    time.Time
	parts   map[int]*part        // by shard index
	uniques map[string][]any     // HyperLogLog key → hashed visitors
	expire  map[string]time.Time // HyperLogLog key → when it expires
}

func newBatchID(made time.Time) string {
	var r [8]byte
	rand.Read(r[:])
	return fmt.Sprintf("%016x", made.UnixMilli()) + hex.EncodeToString(r[:])
}

// cut takes the live rollup, every stripe's, as a batch (nil when there
// was nothing).
func (a *analytics) cut() *batch {
	var cut []rollup
	for i := range a.stripes {
		st := &a.stripes[i]
		st.mu.Lock()
		if !st.live.empty() {
			cut = append(cut, st.live)
			st.live = newRollup()
		}
		st.mu.Unlock()
	}
	if len(cut) == 0 {
		return nil
	}

	now := a.s.cfg.Now()
	b := &batch{id: newBatchID(now), made: now, parts: map[int]*part{}, uniques: map[string][]any{}, expire: map[string]time.Time{}}
	type key struct {
		code             string
		period, dim, bot int
		bucket           int64
		value            string
	}
	sums := map[key]int64{}
	add := func(code string, hour int64, dim int, value string, t tally) {
		day := time.Unix(hour, 0).Truncate(24 * time.Hour).Unix()
		for bot, n := range t {
			if n != 0 {
				sums[key{code, periodHour, dim, bot, hour, value}] += n
				sums[key{code, periodDay, dim, bot, day, value}] += n
			}
		}
	}
	for _, r := range cut {
		for k, h := range r.hours {
			add(k.code, k.hour, 0, "", h.total)
			for i, set := range h.values {
				for _, vc := range set.list {
					if !derived(i+1, vc.value) {
						add(k.code, k.hour, i+1, vc.value, vc.t)
					}
				}
			}
		}
	}
	for k, n := range sums {
		sh := a.s.router.ByKey(k.code)
		p := b.parts[sh.Index]
		if p == nil {
			p = &part{sh: sh}
			b.parts[sh.Index] = p
		}
		p.rows = append(p.rows, countRow{k.code, k.period, k.dim, k.bucket, k.bot, k.value, n})
	}
	for _, p := range b.parts { // one order in every transaction, against deadlocks
		slices.SortFunc(p.rows, func(x, y countRow) int {
			return cmp.Or(strings.Compare(x.code, y.code), cmp.Compare(x.period, y.period), cmp.Compare(x.dim, y.dim),
				cmp.Compare(x.bucket, y.bucket), cmp.Compare(x.bot, y.bot), strings.Compare(x.value, y.value))
		})
	}
	for _, r := range cut {
		for k, vs := range r.visitors {
			key := a.s.uniquesKey(k.code, k.day)
			day := strconv.FormatInt(k.day, 10)
			for v := range vs {
				b.uniques[key] = append(b.uniques[key], visitorHash(k.code, day, v))
			}
			b.expire[key] = time.Unix(k.day, 0).Add(24*time.Hour + a.s.cfg.UniquesTTL)
		}
	}
	a.lastCut = cutSize{parts: len(b.parts), keys: len(b.uniques)}
	for _, p := range b.parts {
		a.lastCut.rows += len(p.rows)
	}
	return b
}

// derived reports whether the row of value in dimension dim (1..) is left
// out of SQL and computed when read: a UTM dimension's ValueNone is the
// total less the other values — nearly every link has no UTM parameters,
// and these rows would be 3 of every 7.
func derived(dim int, value string) bool { return dim >= utmDims && value == ValueNone }

// utmDims is the SQL number of the first UTM dimension.
const utmDims = 4

// visitorHash is what the uniques hold of a visitor: 16 hex digits of a
// SHA-256 of the code, the day, the client IP and the User-Agent — never
// the address, and a different hash for each link and day.
func visitorHash(code, day string, v visitor) string {
	h := sha256.Sum256([]byte(code + "\x00" + day + "\x00" + v.ip + "\x00" + v.ua))
	return hex.EncodeToString(h[:8])
}

// uniquesKey is the HyperLogLog of a link's visitors on the UTC day
// starting at day (Unix seconds), in the link's hash slot.
func (s *Service) uniquesKey(code string, day int64) string {
	return s.space.Key(code, "uv", strconv.FormatInt(day, 10))
}

func (a *analytics) run() {
	a.s.flushLoop("analytics", "the batch is kept and tried again as it is", a.flush, func() []any { return nil }, a.stop, a.done)
}

// flush writes the batch kept from a failed flush, if any, and then — if
// it is written — the clicks counted since the last cut as a new batch.
// While a batch fails, new clicks wait in the live rollup.
func (a *analytics) flush(ctx context.Context) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	if a.pending != nil {
		if err := a.retry(ctx); err != nil {
			return err
		}
	}
	a.pending = a.cut()
	if a.pending == nil {
		return nil
	}
	return a.retry(ctx)
}

// retry writes what is left of the pending batch; one failing for longer
// than maxBatchAge is given up, as a retry could no longer be told from
// a first write.
func (a *analytics) retry(ctx context.Context) error {
	b := a.pending
	if age := a.s.cfg.Now().Sub(b.made); age > maxBatchAge {
		a.pending = nil
		a.count(func(st *AnalyticsStats) { st.Dropped++ })
		return fmt.Errorf("shortlink: analytics batch %s failed for %v and is dropped; its counts are lost", b.id, age.Round(time.Second))
	}
	err := a.write(ctx, b)
	if err == nil {
		a.pending = nil
		a.count(func(st *AnalyticsStats) { st.Flushed++ })
	}
	return err
}

func (a *analytics) count(f func(*AnalyticsStats)) {
	a.mu.Lock()
	f(&a.stats)
	a.mu.Unlock()
}

// write writes b's parts, one transaction each, and its uniques; what is
// written is removed from b.
func (a *analytics) write(ctx context.Context, b *batch) error {
	var errs []error
	for i, p := range b.parts {
		if err := a.writePart(ctx, b.id, p); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(b.parts, i)
	}
	if len(b.uniques) > 0 {
		if err := a.writeUniques(ctx, b); err != nil {
			errs = append(errs, err)
		} else {
			clear(b.uniques)
		}
	}
	return errors.Join(errs...)
}

// errApplied: the shard has already applied this part of the batch.
var errApplied = errors.New("shortlink: batch already applied")

// rowsPerInsert bounds one upsert's rows (7 placeholders each).
const rowsPerInsert = 500

// writePart applies p in one transaction that first records the batch id:
// a part that committed before — its reply lost — meets its own record,
// is rolled back and counts as written.
func (a *analytics) writePart(ctx context.Context, id string, p *part) error {
	table := p.sh.Table
	now := a.s.cfg.Now()
	prune := now.Sub(a.pruned[p.sh.Index]) > pruneEvery
	err := sqlutil.InTx(ctx, p.sh.DB, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+appliedSuffix+" (batch_id) VALUES (?)", id)
		if sqlutil.IsDuplicate(err) {
			return errApplied
		}
		if err != nil {
			return fmt.Errorf("shortlink: record batch in %s%s: %w", table, appliedSuffix, err)
		}
		for rows := range slices.Chunk(p.rows, rowsPerInsert) {
			q, args := upsert(p.sh.DB, table+clicksSuffix, rows)
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("shortlink: add clicks to %s%s: %w", table, clicksSuffix, err)
			}
		}
		if prune {
			oldest := fmt.Sprintf("%016x", now.Add(-appliedKeep).UnixMilli())
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table+appliedSuffix+" WHERE batch_id < ?", oldest); err != nil {
				return fmt.Errorf("shortlink: prune %s%s: %w", table, appliedSuffix, err)
			}
		}
		return nil
	})
	if errors.Is(err, errApplied) {
		a.count(func(st *AnalyticsStats) { st.PartsReplayed++ })
		return nil
	}
	if err == nil && prune {
		a.pruned[p.sh.Index] = now
	}
	if err == nil && a.afterWrite != nil {
		err = a.afterWrite(p.sh.Index)
	}
	return err
}

// upsert is one INSERT adding rows' counts to those stored.
func upsert(db *sqlx.DB, table string, rows []countRow) (string, []any) {
	var q strings.Builder
	q.WriteString("INSERT INTO " + table + " (code, period, dim, bucket, bot, value, n) VALUES ")
	args := make([]any, 0, 7*len(rows))
	for i, r := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
		args = append(args, r.code, r.period, r.dim, r.bucket, r.bot, r.value, r.n)
	}
	if sqlutil.IsMySQL(db) {
		q.WriteString(" ON DUPLICATE KEY UPDATE n = n + VALUES(n)")
	} else {
		q.WriteString(" ON CONFLICT (code, period, dim, bucket, bot, value) DO UPDATE SET n = n + excluded.n")
	}
	return q.String(), args
}

// writeUniques adds the batch's visitors to the days' HyperLogLogs, in one
// pipeline. PFADD adds a member once however often it is sent, so a retry
// cannot inflate them.
func (a *analytics) writeUniques(ctx context.Context, b *batch) error {
	pipe := a.s.rdb.Pipeline()
	for key, vs := range b.uniques {
		pipe.PFAdd(ctx, key, vs...)
		pipe.ExpireAt(ctx, key, b.expire[key])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("shortlink: add unique visitors: %w", err)
	}
	return nil
}

func (a *analytics) close(ctx context.Context) error {
	close(a.stop)
	<-a.done
	return a.flush(ctx)
}
