package shard_test

import (
	"strconv"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shard"
)

func BenchmarkRoute(b *testing.B) {
	r, err := shard.New(repeat(testenv.NewSQL(b), 8), shard.Config{Table: "orders", TablesPerDB: 32})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i*7919)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = r.ByKey(keys[i&1023])
		i++
	}
}
