package order

import (
	"fmt"
	"strings"
)

// Status is an order's state.
type Status string

// Order states. A paid order ships in one or several parcels
// (PartiallyShipped until nothing is left to ship); it may be refunded by
// amount before it ships (Refunding, then back to Paid) and by line at any
// time after payment; refunds worth the whole paid amount make it
// Refunding, then Refunded once paid back.
const (
	Pending          Status = "pending"        // created, stock reserved, waiting for payment
	Paid             Status = "paid"           // paid; stock sold; nothing shipped yet
	PartiallyShipped Status = "partly_shipped" // some units shipped, some still to ship
	Shipped          Status = "shipped"        // every unit not refunded handed to the carrier
	Completed        Status = "completed"      // received (confirmed, or after AutoComplete)
	Closed           Status = "closed"         // never paid: timed out or cancelled; stock released
	Refunding        Status = "refunding"      // an amount refund, or refunds of all that is left, being paid back
	Refunded         Status = "refunded"       // the whole paid amount went back
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
//
// A parcel, or a line refund that leaves nothing to ship, moves a paid order
// along Paid → PartiallyShipped → Shipped; a parcel that is not the last
// keeps it PartiallyShipped (its version and event change, not its status).
// Refunds that bring what is requested back to the whole paid amount move it
// to Refunding from wherever it is; Refunding returns to Paid only when a
// partial amount refund was paid back and no other refund is due.
var Transitions = []Transition{
	{Pending, Paid, "payment succeeded"},
	{Pending, Closed, "timeout or cancel"},
	{Paid, PartiallyShipped, "a parcel shipped some units"},
	{Paid, Shipped, "a parcel shipped every unit not refunded"},
	{PartiallyShipped, Shipped, "the last units shipped, or the rest were refunded"},
	{Shipped, Completed, "received or auto-complete"},
	{Paid, Refunding, "amount refund requested, or refunds of all that is left"},
	{PartiallyShipped, Refunding, "line refunds of all that is left"},
	{Shipped, Refunding, "line refunds (returns) of all that is left"},
	{Completed, Refunding, "line refunds (returns) of all that is left"},
	{Refunding, Paid, "partial amount refund paid back, nothing else due"},
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
		fmt.Fprintf(&b, "%-14s → %-14s %s\n", t.From, t.To, t.Event)
	}
	return b.String()
}

func illegal(id int64, from, to Status) error {
	return fmt.Errorf("%w: order %d is %s, cannot become %s", ErrIllegalTransition, id, from, to)
}
