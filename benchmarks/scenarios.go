package main

import (
	"fmt"
	"time"
)

// Scenario is one capacity case: its inputs, the figures computed from them
// (beside the seed's own, for the seeds' cases), the loads to size machines
// for, the replication of its backends and the data it keeps.
type Scenario struct {
	Name        string
	Inputs      []string
	Figures     []Figure
	Sizings     []Sizing
	Replication Replication
	Storage     []Storage
}

// Scenarios returns the seeds' cases. Every figure is computed from the inputs
// listed with it; the seed's figure is kept beside it, never copied into it.
func Scenarios() []Scenario {
	ss := []Scenario{
		shortLink(), leaderboard(), hotList(), signIn(), orderPay(),
		flashSale(), redPacket(), feed(), eCommerce(),
	}
	for i := range ss {
		ss[i].Replication = defaultReplication
	}
	return ss
}

func shortLink() Scenario {
	const links, readsEach, bytesPer = 1e6, 100, 300
	writes := Load{PerDay: links, Window: day, Share: 1, PeakFactor: 5}
	reads := Load{PerDay: links * readsEach, Window: day, Share: 1, PeakFactor: 3}
	perYear := links * bytesPer * year
	return Scenario{
		Name:   "short link",
		Inputs: []string{"1M links/day", "100 reads/link", "peak ×3 reads, ×5 writes", "300 B/record"},
		Figures: []Figure{
			{Name: "avg reads", Unit: "/s", Value: reads.Avg(), Seed: 1157},
			{Name: "peak reads", Unit: "/s", Value: reads.Peak(), Seed: 3500},
			{Name: "avg writes", Unit: "/s", Value: writes.Avg(), Seed: 11.6},
			{Name: "peak writes", Unit: "/s", Value: writes.Peak(), Seed: 60},
			{Name: "storage per year", Unit: "B", Value: perYear, Seed: 110 * GB},
			{Name: "storage, 5 years", Unit: "B", Value: 5 * perYear, Seed: 550 * GB},
		},
		Sizings: []Sizing{
			{What: "peak new codes/s", Peak: writes.Peak(), Measurement: "idgen.shortcode", Answers: "peak writes"},
			{What: "peak redirects/s", Peak: reads.Peak(), Measurement: "shortlink.redirect", Answers: "peak reads"},
		},
		Storage: []Storage{{What: "links, 5 years", PerDay: links, RetentionDays: 5 * year, BytesPerRecord: bytesPer, On: TierMySQL}},
	}
}

func leaderboard() Scenario {
	const dau, games, bytesPer, players = 5e6, 10, 70, 50e6
	// One score write per game, and one board view after each game.
	writes := Load{PerDay: dau * games, Window: 4 * time.Hour, Share: 1, PeakFactor: 3}
	reads := writes
	return Scenario{
		Name:   "leaderboard",
		Inputs: []string{"50M players", "5M DAU × 10 games/day", "4 h evening window", "peak ×3", "one board view per game", "70 B/member"},
		Figures: []Figure{
			{Name: "peak score writes", Unit: "/s", Value: writes.Peak(), Seed: 10416},
			{Name: "peak board reads", Unit: "/s", Value: reads.Peak(), Seed: 10000},
			{Name: "sorted-set memory", Unit: "B", Value: players * bytesPer, Seed: 3.5 * GB},
		},
		Sizings: []Sizing{
			{What: "peak score writes/s", Peak: writes.Peak(), Measurement: "rank.add", Answers: "peak score writes"},
			{What: "peak own-rank reads/s", Peak: reads.Peak(), Measurement: "rank.rank", Answers: "peak board reads"},
		},
		Storage: []Storage{{What: "board members", Records: players, BytesPerRecord: bytesPer, On: TierRedis, MeasuredBy: "rank.add"}},
	}
}

func hotList() Scenario {
	const dau, interactions, views, items, bytesPer = 100e6, 20, 2, 5e6, 70
	writes := Load{PerDay: dau * interactions, Window: 4 * time.Hour, Share: 1, PeakFactor: 3}
	reads := Load{PerDay: dau * views, Window: 4 * time.Hour, Share: 1, PeakFactor: 3}
	return Scenario{
		Name:   "hot list",
		Inputs: []string{"100M DAU × 20 interactions/day", "2 list views/user/day", "4 h window", "peak ×3", "5M active items × 70 B"},
		Figures: []Figure{
			{Name: "peak events", Unit: "/s", Value: writes.Peak(), Seed: 4.17e6},
			{Name: "peak list reads", Unit: "/s", Value: reads.Peak(), Seed: 417e3},
			{Name: "item memory", Unit: "B", Value: items * bytesPer, Seed: 350 * MB},
		},
		Sizings: []Sizing{
			{What: "peak events/s", Peak: writes.Peak(), Measurement: "hotlist.event", Answers: "peak events"},
			{What: "peak list reads/s", Peak: reads.Peak(), Measurement: "hotlist.read", Answers: "peak list reads"},
		},
		Storage: []Storage{{What: "active items", Records: items, BytesPerRecord: bytesPer, On: TierRedis}},
	}
}

func signIn() Scenario {
	const dau, bytesPer, readsPerWrite = 1e6, 50, 10
	writes := Load{PerDay: dau, Window: 2 * time.Hour, Share: 1, PeakFactor: 5}
	bitmapBytes := float64((366 + 7) / 8) // one bit per day of a leap year
	return Scenario{
		Name:   "sign-in",
		Inputs: []string{"1M DAU, all sign", "2 h window", "peak ×5", "reads = 10 × writes", "50 B/record"},
		Figures: []Figure{
			{Name: "avg sign-ins", Unit: "/s", Value: writes.Avg(), Seed: 139},
			{Name: "peak sign-ins", Unit: "/s", Value: writes.Peak(), Seed: 700},
			{Name: "peak reads", Unit: "/s", Value: readsPerWrite * writes.Peak(), Seed: 7000},
			{Name: "record storage per year", Unit: "B", Value: dau * bytesPer * year, Seed: 18 * GB},
			{Name: "bitmaps per year", Unit: "B", Value: dau * bitmapBytes, Seed: 46 * MB},
		},
		Sizings: []Sizing{
			{What: "peak sign-ins/s", Peak: writes.Peak(), Measurement: "signin.sign", Answers: "peak sign-ins"},
			{What: "peak calendar reads/s", Peak: readsPerWrite * writes.Peak(), Measurement: "signin.read", Answers: "peak reads"},
		},
		Storage: []Storage{
			{What: "sign-in records, 1 year", PerDay: dau, RetentionDays: year, BytesPerRecord: bytesPer, On: TierMySQL},
			{What: "bitmaps, 1 year", Records: dau, BytesPerRecord: bitmapBytes, On: TierRedis, MeasuredBy: "signin.sign"},
		},
	}
}

func orderPay() Scenario {
	const dau, orderRate, writesPer, bytesPer = 5e6, 0.05, 10, 1 * KB
	orders := Load{PerDay: dau * orderRate, Window: 4 * time.Hour, Share: 0.8, PeakFactor: 5}
	sale := Load{PerDay: 5e6, Window: time.Hour, Share: 1, PeakFactor: 5}
	return Scenario{
		Name:   "order & pay",
		Inputs: []string{"5M DAU, 5% order", "80% in 4 h", "peak ×5", "10 DB writes/order", "1 KB/order", "sale: 5M orders in 1 h, ×5"},
		Figures: []Figure{
			{Name: "avg orders", Unit: "/s", Value: orders.Avg(), Seed: 14},
			{Name: "peak orders", Unit: "/s", Value: orders.Peak(), Seed: 70, NotSized: "a tenth of the sale's peak, which is sized"},
			{Name: "peak DB writes", Unit: "/s", Value: writesPer * orders.Peak(), Seed: 700,
				NotSized: "in the orders' sizing: order.create measures whole orders, each one batch of its rows"},
			{Name: "sale peak orders", Unit: "/s", Value: sale.Peak(), Seed: 7000},
			{Name: "sale peak DB writes", Unit: "/s", Value: writesPer * sale.Peak(), Seed: 70000,
				NotSized: "in the sale's orders: order.create measures whole orders, each one batch of its rows"},
			{Name: "storage per year", Unit: "B", Value: dau * orderRate * bytesPer * year, Seed: 91 * GB},
		},
		Sizings: []Sizing{
			{What: "sale peak orders/s", Peak: sale.Peak(), Measurement: "order.create", Answers: "sale peak orders"},
			{What: "sale peak order numbers/s", Peak: sale.Peak(), Measurement: "idgen.snowflake", Answers: "sale peak orders"},
		},
		Storage: []Storage{{What: "orders, 1 year", PerDay: dau * orderRate, RetentionDays: year, BytesPerRecord: bytesPer, On: TierMySQL}},
	}
}

func flashSale() Scenario {
	const requests, admitted, stock = 1e6, 100e3, 5000
	gateway := Load{PerDay: requests, Window: time.Second, Share: 1, PeakFactor: 1}
	service := Load{PerDay: admitted, Window: time.Second, Share: 1, PeakFactor: 1}
	return Scenario{
		Name:   "flash sale",
		Inputs: []string{"5000 stock", "1M requests in one second", "100k admitted past the gateway"},
		Figures: []Figure{
			{Name: "gateway", Unit: "/s", Value: gateway.Peak(), Seed: 1e6,
				NotSized: "the gateway in front of the service (rate limits, queueing) is not a casebook block"},
			{Name: "to the service", Unit: "/s", Value: service.Peak(), Seed: 1e5},
			{Name: "winners", Unit: "", Value: stock},
		},
		Sizings: []Sizing{{What: "stock decisions/s", Peak: service.Peak(), Measurement: "seckill.buy.batched", Answers: "to the service"}},
	}
}

func redPacket() Scenario {
	const packets, grabs, bytesPer, statedPeak = 3.777e9, 10, 100, 760e3
	// Rows per packet: one per grab, the send record and, at most, a refund.
	const rowsPerPacket = grabs + 1 + 1
	rows := packets * rowsPerPacket
	grabLoad := Load{PerDay: packets * grabs, Window: day, Share: 1, PeakFactor: 1}
	return Scenario{
		Name: "red packet",
		Inputs: []string{"3.777e9 packets/day", "10 grabs each", "rows: grabs + send + refund", "100 B/record",
			fmt.Sprintf("peak 760k grabs/s (stated; %.1f× the day's average)", statedPeak/grabLoad.Avg())},
		Figures: []Figure{
			{Name: "grab rows per day", Unit: "", Value: packets * grabs, Seed: 37.77e9},
			{Name: "rows per day", Unit: "", Value: rows, Seed: 40e9, AtLeast: true},
			{Name: "storage per day", Unit: "B", Value: rows * bytesPer, Seed: 40 * TB},
			{Name: "avg grabs", Unit: "/s", Value: grabLoad.Avg()},
			{Name: "peak grabs (stated)", Unit: "/s", Value: statedPeak},
		},
		Sizings: []Sizing{{What: "peak grabs/s", Peak: statedPeak, Measurement: "redpacket.grab.batched", Answers: "peak grabs (stated)"}},
		// The seed gives storage per day and no retention.
		Storage: []Storage{{What: "rows, 1 day", PerDay: rows, RetentionDays: 1, BytesPerRecord: bytesPer, On: TierMySQL}},
	}
}

func feed() Scenario {
	const dau, posts, refreshes, postBytes, images, imageBytes = 500e6, 0.5, 10, 1 * KB, 3, 500 * KB
	writes := Load{PerDay: dau * posts, Window: day, Share: 1, PeakFactor: 3}
	reads := Load{PerDay: dau * refreshes, Window: day, Share: 1, PeakFactor: 3}
	return Scenario{
		Name:   "feed",
		Inputs: []string{"500M DAU", "0.5 posts, 10 refreshes/user/day", "peak ×3", "1 KB/post", "3 images × 500 KB/post"},
		Figures: []Figure{
			{Name: "peak posts", Unit: "/s", Value: writes.Peak(), Seed: 8700},
			{Name: "peak timeline reads", Unit: "/s", Value: reads.Peak(), Seed: 170e3},
			{Name: "post storage per year", Unit: "B", Value: dau * posts * postBytes * year, Seed: 91 * TB},
			{Name: "images per day", Unit: "B", Value: dau * posts * images * imageBytes, Seed: 3.75 * PB},
		},
		Sizings: []Sizing{
			{What: "peak post ids/s", Peak: writes.Peak(), Measurement: "idgen.snowflake", Answers: "peak posts"},
			{What: "peak timeline reads/s", Peak: reads.Peak(), Measurement: "feed.read", Answers: "peak timeline reads"},
		},
		// Images go to an object store, which this harness does not size.
		Storage: []Storage{{What: "posts, 1 year", PerDay: dau * posts, RetentionDays: year, BytesPerRecord: postBytes, On: TierMySQL}},
	}
}

func eCommerce() Scenario {
	const orders, skus, skuBytes = 500e3, 5e6, 200
	// Seed 004's sale: 20,000 buy requests/s reach the gate, which stops
	// 99% of them (sold out) in Redis; Kafka shaves the rest to the 2,000
	// order writes/s the consumers are throttled to.
	const saleRequests, stopped, writes = 20e3, 0.99, 2e3
	load := Load{PerDay: orders, Window: day, Share: 1, PeakFactor: 6}
	return Scenario{
		Name: "e-commerce",
		Inputs: []string{"500k orders/day", "peak factor 6", "5M SKUs × 200 B in Redis",
			"sale: 20k buy requests/s at the gate, 99% stopped there", "orders written at 2k/s (throttled consumers)"},
		Figures: []Figure{
			{Name: "peak orders", Unit: "/s", Value: load.Peak(), Seed: 350},
			{Name: "SKU cache", Unit: "B", Value: skus * skuBytes, Seed: 1 * GB},
			{Name: "sale requests stopped at the gate", Unit: "/s", Value: saleRequests * stopped},
			{Name: "sale purchases decided", Unit: "/s", Value: saleRequests * (1 - stopped)},
			{Name: "sale orders written", Unit: "/s", Value: writes},
		},
		Sizings: []Sizing{
			{What: "peak orders/s", Peak: load.Peak(), Measurement: "order.create", Answers: "peak orders"},
			{What: "sale: sold-out answers/s", Peak: saleRequests * stopped, Measurement: "seckill.soldout", Answers: "sale requests stopped at the gate"},
			{What: "sale: purchases decided/s", Peak: saleRequests * (1 - stopped), Measurement: "seckill.buy.batched", Answers: "sale purchases decided"},
			{What: "sale: orders written/s (throttled)", Peak: writes, Measurement: "seckill.orders", Answers: "sale orders written"},
		},
		Storage: []Storage{{What: "SKU cache", Records: skus, BytesPerRecord: skuBytes, On: TierRedis}},
	}
}
