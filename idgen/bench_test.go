package idgen_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/bwmarrin/snowflake"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// BenchmarkSnowflake measures the wrapper against bwmarrin called directly,
// in one run; both are capped at 4096 ids/ms per node.
func BenchmarkSnowflake(b *testing.B) {
	ctx := context.Background()
	s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	n, err := snowflake.NewNode(2)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("impl=casebook", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=bwmarrin", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n.Generate()
		}
	})
}

// BenchmarkSegmentNext: Next against a Redis source, from a starting step
// of 1,000 (which the dynamic step grows) and of 1,000,000, beside a bare
// atomic add in the same run. In the steady state Next does no I/O.
func BenchmarkSegmentNext(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	var counter atomic.Int64
	b.Run("atomic-add", func(b *testing.B) {
		for b.Loop() {
			counter.Add(1)
		}
	})
	for _, step := range []int64{1000, 1_000_000} {
		seg, err := idgen.NewSegment(ctx, idgen.NewRedisSource(r.Client, r.Namespace), idgen.SegmentConfig{Tag: fmt.Sprint("bench", step), Step: step})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("step-%d", step), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := seg.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("step-%d-parallel", step), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := seg.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		seg.Close()
	}
}

func BenchmarkShortCode(b *testing.B) {
	codes, _ := idgen.NewShortCodes(nil, idgen.ShortCodeConfig{Key: 1})
	b.ReportAllocs()
	n := uint64(0)
	for b.Loop() {
		n++
		if _, err := codes.Encode(n); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShortCodeDecode(b *testing.B) {
	codes, _ := idgen.NewShortCodes(nil, idgen.ShortCodeConfig{Key: 1})
	code, _ := codes.Encode(123456789)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codes.Decode(code); err != nil {
			b.Fatal(err)
		}
	}
}
