package shard_test

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/shard"
)

func ExampleRouter() {
	// 8 databases × 8 tables; the *sqlx.DB values would be 8 real pools.
	r, _ := shard.New(make([]*sqlx.DB, 8), shard.Config{Table: "orders", TablesPerDB: 8})
	s := r.ByKey("user-42")
	fmt.Println(r.Tables(), s.DBIndex == s.Index/8, len(s.Table))
	// Output: 64 true 10
}

func ExampleGather() {
	r, _ := shard.New(make([]*sqlx.DB, 1), shard.Config{Table: "scores", TablesPerDB: 3})
	perShard := [][]int{{90, 40}, {95, 10}, {70}} // each shard's rows, best first
	top, _ := shard.Gather(context.Background(), r.All(), 0,
		func(_ context.Context, s shard.Shard) ([]int, error) { return perShard[s.Index], nil },
		func(a, b int) bool { return a > b }, 3)
	fmt.Println(top)
	// Output: [95 90 70]
}
