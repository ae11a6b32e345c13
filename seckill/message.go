package seckill

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/casebook-dev/casebook/internal/strictjson"
)

// OrderVersion is the format version of the order messages this package
// writes and reads.
const OrderVersion = 1

// An order message is what the relay publishes for one decided batch: its
// key is "<campaign>-<bucket>" — a hot campaign's orders spread over as many
// partitions as it has buckets, so that as many consumers write them — and
// its value JSON of format version 1, written by the buy scripts (buy.lua
// writes the caller's string, or slices of it: see allReserved):
//
//	{"v":1,"campaign":"double11","orders":[
//	  {"id":"double11-3-1867162712440455168","user":"alice","qty":1,"pay_by":1794528900000},
//	  {"id":"double11-3-1867162712440455168.1","user":"bob","qty":1,"pay_by":1794528900000}]}
//
// pay_by is the payment deadline in Unix milliseconds. Decoding is strict: an
// unknown version or field, a missing or malformed field, or trailing data is
// ErrBadMessage (which is outbox.ErrPoison for consumers).
type OrderMessage struct {
	Campaign string
	Orders   []Order
}

// Order is one reservation to record as an order.
type Order struct {
	ID    string    `json:"id"` // reservation id "<campaign>-<bucket>-<batch>[.<slot>]"
	User  string    `json:"user"`
	Qty   int64     `json:"qty"`
	PayBy time.Time `json:"pay_by"` // payment deadline, to the millisecond
}

type wireMessage struct {
	V        int         `json:"v"`
	Campaign string      `json:"campaign"`
	Orders   []wireOrder `json:"orders"`
}

type wireOrder struct {
	ID    string `json:"id"`
	User  string `json:"user"`
	Qty   int64  `json:"qty"`
	PayBy int64  `json:"pay_by"`
}

// EncodeOrderMessage returns m as an order message value (for replays and
// tests; the buy scripts write the same format).
func EncodeOrderMessage(m OrderMessage) []byte {
	w := wireMessage{V: OrderVersion, Campaign: m.Campaign, Orders: make([]wireOrder, len(m.Orders))}
	for i, o := range m.Orders {
		w.Orders[i] = wireOrder{ID: o.ID, User: o.User, Qty: o.Qty, PayBy: o.PayBy.UnixMilli()}
	}
	b, _ := json.Marshal(w) // strings and integers: cannot fail
	return b
}

// DecodeOrderMessage parses and validates an order message value.
func DecodeOrderMessage(value []byte) (OrderMessage, error) {
	var w wireMessage
	if err := strictjson.Decode(value, &w); err != nil {
		return OrderMessage{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if w.V != OrderVersion {
		return OrderMessage{}, fmt.Errorf("%w: format version %d, want %d", ErrBadMessage, w.V, OrderVersion)
	}
	if !idPattern.MatchString(w.Campaign) {
		return OrderMessage{}, fmt.Errorf("%w: campaign %q", ErrBadMessage, w.Campaign)
	}
	if len(w.Orders) == 0 {
		return OrderMessage{}, fmt.Errorf("%w: no orders", ErrBadMessage)
	}
	m := OrderMessage{Campaign: w.Campaign, Orders: make([]Order, len(w.Orders))}
	for i, o := range w.Orders {
		id, err := splitID(o.ID)
		switch {
		case err != nil || id.campaign != w.Campaign:
			return OrderMessage{}, fmt.Errorf("%w: order id %q not of campaign %s", ErrBadMessage, o.ID, w.Campaign)
		case !userPattern.MatchString(o.User):
			return OrderMessage{}, fmt.Errorf("%w: user %q", ErrBadMessage, o.User)
		case o.Qty < 1:
			return OrderMessage{}, fmt.Errorf("%w: quantity %d", ErrBadMessage, o.Qty)
		case o.PayBy <= 0:
			return OrderMessage{}, fmt.Errorf("%w: payment deadline %d", ErrBadMessage, o.PayBy)
		}
		m.Orders[i] = Order{ID: o.ID, User: o.User, Qty: o.Qty, PayBy: time.UnixMilli(o.PayBy)}
	}
	return m, nil
}
