package seckill_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/seckill"
)

// Campaign, Order and Report serialise in snake_case.
func TestWireForm(t *testing.T) {
	at := time.UnixMilli(testenv.Now().UnixMilli()).UTC()
	stamp, _ := at.MarshalJSON()
	for _, c := range []struct {
		v    any
		want string
	}{
		{seckill.Campaign{ID: "c1", SKU: "s1", Price: 100, Stock: 5, Limit: 1, Buckets: 2, Starts: at, Ends: at},
			`{"id":"c1","sku":"s1","price":100,"stock":5,"limit":1,"buckets":2,"starts":` + string(stamp) + `,"ends":` + string(stamp) + `}`},
		{seckill.Order{ID: "c1-0-7", User: "u", Qty: 1, PayBy: at}, `{"id":"c1-0-7","user":"u","qty":1,"pay_by":` + string(stamp) + `}`},
		{seckill.Report{SQLStock: 5, RedisStock: 4, InFlight: 1, Repaired: true},
			`{"sql_stock":5,"redis_stock":4,"in_flight":1,"drift":0,"lost_buckets":0,"missing":0,"stale":0,"short_quotas":0,"repaired":true}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T: %s, %v; want %s", c.v, b, err, c.want)
		}
	}
}
