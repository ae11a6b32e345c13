package order_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
)

// Callback bodies from the network: never a panic; anything accepted
// re-encodes to a body that decodes to the same callback.
func FuzzDecodeCallback(f *testing.F) {
	f.Add([]byte(`{"pay_no":123,"gateway_txn":"wx-1","amount":500,"currency":"CNY","success":true}`))
	f.Add([]byte(`{"pay_no":1} {"pay_no":2}`))
	f.Add([]byte(`{"pay_no":1,"extra":true}`))
	f.Add([]byte(`  {"pay_no":-1,"paid_at":"2026-11-30T10:00:00Z"}  `))
	f.Fuzz(func(t *testing.T, body []byte) {
		cb, err := order.DecodeCallback(body)
		if err != nil {
			if !errors.Is(err, order.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		again, err := json.Marshal(cb)
		if err != nil {
			t.Fatal(err)
		}
		back, err := order.DecodeCallback(again)
		if err != nil || back.PayNo != cb.PayNo || back.GatewayTxn != cb.GatewayTxn || back.Amount != cb.Amount || !back.PaidAt.Equal(cb.PaidAt) {
			t.Fatalf("%q → %+v → %q → %+v, %v", body, cb, again, back, err)
		}
	})
}

// Event values from Kafka: never a panic; a rejected one is poison.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"o1-v2","kind":"status","order":1,"user":"u","from":"pending","to":"paid","version":2,"amount":5,"at":1}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, value []byte) {
		e, err := order.DecodeEvent(value)
		if err != nil {
			if !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, order.ErrBadEvent) {
				t.Fatalf("rejection not poison: %v", err)
			}
			return
		}
		if e.V != order.EventVersion || e.ID == "" || e.OrderID <= 0 {
			t.Fatalf("accepted %q as %+v", value, e)
		}
	})
}

// Statements from a gateway: never a panic; a malformed one is ErrInvalid
// as a whole.
func FuzzParseStatement(f *testing.F) {
	f.Add([]byte(order.StatementHeader + "\nwx-1,123,500,SUCCESS,2026-11-30T10:00:00Z\n"))
	f.Add([]byte(order.StatementHeader + "\nwx-1,123,500,SUCCESS\n"))
	f.Add([]byte("x\n"))
	f.Fuzz(func(t *testing.T, csv []byte) {
		lines, err := order.ParseStatement(bytes.NewReader(csv))
		if err != nil {
			if !errors.Is(err, order.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		for _, l := range lines {
			if l.PayNo <= 0 || l.Amount < 0 || l.GatewayTxn == "" {
				t.Fatalf("accepted line %+v", l)
			}
		}
	})
}
