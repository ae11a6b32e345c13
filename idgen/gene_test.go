package idgen

import (
	"errors"
	"testing"
)

func TestGenes(t *testing.T) {
	g := Genes{Bits: 8}
	for _, c := range []struct {
		base int64
		gene uint64
	}{{0, 0}, {1, 255}, {123456789, 17}, {1<<55 - 1, 200}} {
		id, err := g.Make(c.base, c.gene)
		if err != nil {
			t.Fatal(err)
		}
		if g.Gene(id) != c.gene || g.Base(id) != c.base || id < 0 {
			t.Errorf("Make(%d, %d) = %d: gene %d base %d", c.base, c.gene, id, g.Gene(id), g.Base(id))
		}
	}
	if _, err := g.Make(1, 256); !errors.Is(err, ErrGeneRange) {
		t.Errorf("gene 256 in 8 bits: %v", err)
	}
	if _, err := g.Make(1<<55, 0); !errors.Is(err, ErrGeneBase) {
		t.Errorf("base 2^55 with 8 bits: %v", err)
	}
	if _, err := g.Make(-1, 0); !errors.Is(err, ErrGeneBase) {
		t.Errorf("negative base: %v", err)
	}
	if _, err := (Genes{}).Make(1, 0); err == nil {
		t.Error("zero Genes accepted")
	}
	first := g.Of("user-42")
	if again := g.Of("user-42"); again != first || first > 255 {
		t.Errorf("Of(user-42) = %d then %d: must be stable and fit 8 bits", first, again)
	}
}
