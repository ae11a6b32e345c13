package idgen

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Genes builds ids that carry a shard number ("gene") in their low Bits, so a
// row can be routed from its id alone ("基因法"): an order id carries its
// user's gene, and orders sharded by user are found by order id without a
// lookup table.
//
// The gene of a key is the low Bits of xxhash(key), the same hash shard.Router
// routes keys by; with a power-of-two table count T ≤ 2^Bits, gene % T is the
// key's table. The zero value is unusable; Bits is 1..16.
type Genes struct {
	Bits uint
}

var (
	// ErrGeneRange is returned for a gene that does not fit Bits.
	ErrGeneRange = errors.New("idgen: gene does not fit its bits")
	// ErrGeneBase is returned for a base id too large to shift by Bits.
	ErrGeneBase = errors.New("idgen: base id too large to carry a gene")
)

func (g Genes) mask() uint64 { return 1<<g.Bits - 1 }

// Of returns the gene of key.
func (g Genes) Of(key string) uint64 { return xxhash.Sum64String(key) & g.mask() }

// Make returns base<<Bits | gene. base must be in [0, 2^(63-Bits)), which a
// segment counter is for centuries; a snowflake id is not (it uses 63 bits).
func (g Genes) Make(base int64, gene uint64) (int64, error) {
	if g.Bits < 1 || g.Bits > 16 {
		return 0, fmt.Errorf("idgen: gene bits %d outside 1..16", g.Bits)
	}
	if gene > g.mask() {
		return 0, fmt.Errorf("%w: %d ≥ 2^%d", ErrGeneRange, gene, g.Bits)
	}
	if base < 0 || base >= 1<<(63-g.Bits) {
		return 0, fmt.Errorf("%w: %d", ErrGeneBase, base)
	}
	return base<<g.Bits | int64(gene), nil
}

// Gene returns the gene an id carries.
func (g Genes) Gene(id int64) uint64 { return uint64(id) & g.mask() }

// Base returns the id without its gene.
func (g Genes) Base(id int64) int64 { return id >> g.Bits }
