// Package gene holds what the blocks that shard rows by a user's gene
// (order, redpacket) share: the check of their table layout, the
// numbers they issue — gene ids from an SQL-leased segment, which never
// repeat whatever Redis forgets — and the naming of a shard's sibling
// tables.
package gene

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Bits is the gene width: 16 bits route to up to 65,536 tables.
const Bits = 16

// Genes are the block's gene ids.
var Genes = idgen.Genes{Bits: Bits}

// CheckDatabases readies the block's databases (sqlutil.Check), requires
// them to share one driver (the block speaks one dialect to all), and checks
// the layout (see checkLayout).
func CheckDatabases(dbs []*sqlx.DB, tablesPerDB int, block string) error {
	for _, db := range dbs {
		if err := sqlutil.Check(db, block); err != nil {
			return err
		}
		if db.DriverName() != dbs[0].DriverName() {
			return fmt.Errorf("%s: databases mix drivers %q and %q", block, dbs[0].DriverName(), db.DriverName())
		}
	}
	return checkLayout(len(dbs), tablesPerDB)
}

// checkLayout returns an error unless dbs × tablesPerDB is a power of two ≤
// 65,536, so that an id's gene (its low bits) routes it: gene % T is the
// table of a key whose hash is gene when T divides 2^Bits.
func checkLayout(dbs, tablesPerDB int) error {
	total := dbs * tablesPerDB
	if dbs == 0 || tablesPerDB < 1 || total > 1<<Bits || total&(total-1) != 0 {
		return fmt.Errorf("%d databases × %d tables: the total must be a power of two ≤ %d", dbs, tablesPerDB, 1<<Bits)
	}
	return nil
}

// Sibling is the physical name of the table logical beside sh — in its
// database, with its number: Sibling(orders_007, "payments") is
// payments_007.
func Sibling(sh shard.Shard, logical string) string {
	return logical + sh.Table[strings.LastIndexByte(sh.Table, '_'):]
}

// IDs issues gene ids from a segment leased from SQL, opened on first use.
// It is safe for concurrent use.
type IDs struct {
	src  *idgen.SQLSource
	tag  string
	step int64

	mu  sync.Mutex
	seg *idgen.Segment
}

// NewIDs issues ids leased from src under tag, step at a time to begin
// with (the segment's step then adapts to demand). The tag names the tables
// the ids number, never a Redis namespace: two services with different
// namespaces over the same tables must draw from one sequence, or they
// issue the same ids.
func NewIDs(src *idgen.SQLSource, tag string, step int64) *IDs {
	return &IDs{src: src, tag: tag, step: step}
}

// Next returns a fresh id carrying gene.
func (d *IDs) Next(ctx context.Context, gene uint64) (int64, error) {
	d.mu.Lock()
	if d.seg == nil {
		var err error
		if d.seg, err = idgen.NewSegment(ctx, d.src, idgen.SegmentConfig{Tag: d.tag, Step: d.step}); err != nil {
			d.mu.Unlock()
			return 0, fmt.Errorf("id segment: %w", err)
		}
	}
	seg := d.seg
	d.mu.Unlock()
	base, err := seg.Next(ctx)
	if err != nil {
		return 0, fmt.Errorf("next id: %w", err)
	}
	return Genes.Make(base, gene)
}

// Close stops the segment's background lease; safe to call twice.
func (d *IDs) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seg != nil {
		d.seg.Close()
	}
}

// ValidID checks an id the blocks store in ASCII key columns: 1..64 bytes
// of printable ASCII.
func ValidID(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("id of %d bytes (1..64)", len(s))
	}
	for i := range len(s) {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("id byte %#x (printable ASCII only)", c)
		}
	}
	return nil
}
