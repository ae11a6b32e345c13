package order

import (
	"fmt"
	"strings"
)

// Status is an order's state.
type Status string

// Order states. Paid orders may be refunded in part (back to Paid) or in
// full (Refunded).
const (
	Pending   Status = "pending"   // created, stock reserved, waiting for payment
	Paid      Status = "paid"      // paid; stock sold
	Shipped   Status = "shipped"   // handed to the carrier
	Completed Status = "completed" // received (confirmed, or after AutoComplete)
	Closed    Status = "closed"    // never paid: timed out or cancelled; stock released
	Refunding Status = "refunding" // a refund is being paid back
	Refunded  Status = "refunded"  // the whole paid amount went back
)

// Reasons an order is closed.
const (
	ReasonTimeout         = "timeout"
	ReasonUserCancel      = "cancelled_by_user"
	ReasonOperatorCancel  = "cancelled_by_operator"
	ReasonOutOfStock      = "out_of_stock"
	ReasonPaymentRejected = "payment_rejected"
)

// Transition is one edge of the order state machine.
type Transition struct {
	From, To Status
	Event    string // what causes it
}

// Transitions is the whole state machine; every status change an order makes
// is one of these, applied as a conditional UPDATE (WHERE status = From AND
// version = the version read) in one transaction with its outbox event.
var Transitions = []Transition{
	{Pending, Paid, "payment succeeded"},
	{Pending, Closed, "timeout or cancel"},
	{Paid, Shipped, "shipped"},
	{Shipped, Completed, "received or auto-complete"},
	{Paid, Refunding, "refund requested"},
	{Refunding, Paid, "partial refund paid back"},
	{Refunding, Refunded, "full refund paid back"},
}

// CanTransition reports whether the state machine has an edge from → to.
func CanTransition(from, to Status) bool {
	for _, t := range Transitions {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}

// StateTable renders Transitions as a text table.
func StateTable() string {
	var b strings.Builder
	for _, t := range Transitions {
		fmt.Fprintf(&b, "%-10s → %-10s %s\n", t.From, t.To, t.Event)
	}
	return b.String()
}

func illegal(id int64, from, to Status) error {
	return fmt.Errorf("%w: order %d is %s, cannot become %s", ErrIllegalTransition, id, from, to)
}
