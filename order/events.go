package order

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
)

// EventVersion is the format version of the events this package writes and
// reads.
const EventVersion = 1

// Event kinds.
const (
	EventStatus          = "status"           // an order changed state (From → To)
	EventCreated         = "created"          // an order was recorded (To = Pending)
	EventRefundRequested = "refund_requested" // money must go back (Amount, PayNo, RefundNo, Reason); RefundOf has a line refund's lines
	EventParcel          = "parcel"           // a parcel shipped (ParcelNo, Lines; Amount: the goods' value)
)

// Event is what the order outbox publishes, keyed by order id, as JSON:
//
//	{"v":1,"id":"o123-v2","kind":"status","order":123,"user":"u1","from":"pending","to":"paid","version":2,"amount":990,"at":1764480000000}
//
// ID is unique per event (order and version, refund number, or "p" and the
// parcel number), so consumers de-duplicate on it; delivery is
// at-least-once. ParcelNo and Lines appear only in parcel events (a
// consumer built before parcels refuses those as poison and reads every
// other event as before; upgrade consumers first).
type Event struct {
	V       int    `json:"v"`
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	OrderID int64  `json:"order"`
	User    string `json:"user"`
	From    Status `json:"from,omitempty"`
	To      Status `json:"to,omitempty"`
	// Version is the order's version after the change; it also grows
	// without an event of its own (a parcel, a line refund), so a
	// consumer sees gaps: order by it, never count on it being contiguous.
	Version  int64  `json:"version,omitempty"`
	Amount   int64  `json:"amount"`
	PayNo    int64  `json:"pay_no,omitempty"`
	RefundNo int64  `json:"refund_no,omitempty"`
	ParcelNo int64  `json:"parcel_no,omitempty"`
	Lines    []Line `json:"lines,omitempty"`
	Reason   string `json:"reason,omitempty"`
	At       int64  `json:"at"` // Unix ms
}

// ErrBadEvent is returned by DecodeEvent for anything that is not an event
// of this version; it is marked outbox.ErrPoison.
var ErrBadEvent = errors.New("order: bad event")

// DecodeEvent parses an event message value.
func DecodeEvent(value []byte) (Event, error) {
	var e Event
	if err := strictjson.Decode(value, &e); err != nil {
		return Event{}, outbox.Poison(fmt.Errorf("%w: %w", ErrBadEvent, err))
	}
	if e.V != EventVersion || e.ID == "" || e.OrderID <= 0 || e.Kind == "" {
		return Event{}, outbox.Poison(fmt.Errorf("%w: %q", ErrBadEvent, value))
	}
	return e, nil
}

// emit records e in the outbox of tx's database.
func (s *Service) emit(ctx context.Context, tx *sqlx.Tx, e Event) error {
	return s.emitAll(ctx, tx, []Event{e})
}

// emitAll records events in the outbox of tx's database, in one statement.
func (s *Service) emitAll(ctx context.Context, tx *sqlx.Tx, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO order_outbox (event_id, order_id, payload, created_at, sent_at) VALUES `)
	args := make([]any, 0, 4*len(events))
	for i, e := range events {
		e.V = EventVersion
		if e.ID == "" {
			e.ID = "o" + strconv.FormatInt(e.OrderID, 10) + "-v" + strconv.FormatInt(e.Version, 10)
		}
		payload, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("order: encode event: %w", err)
		}
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString(`(?, ?, ?, ?, 0)`)
		args = append(args, e.ID, e.OrderID, payload, e.At)
	}
	if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("order: outbox: %w", err)
	}
	return nil
}

// RelayOutbox publishes unsent outbox events of every database to topic,
// keyed by order id, at most batch per database per call, and marks them
// sent. It returns how many it published.
//
// Rows are claimed with SELECT … FOR UPDATE SKIP LOCKED (MySQL 8, MariaDB
// 10.6+), so several relays run side by side on disjoint rows, and a row is
// found by its "unsent" mark, never by an id watermark: a transaction that
// commits late, with an id below rows already relayed, is still relayed.
// A relay that dies between the publisher's acknowledgement and the mark
// publishes those rows again: delivery is at-least-once.
func (s *Service) RelayOutbox(ctx context.Context, pub outbox.Publisher, topic string, batch int) (int, error) {
	ctx, call := s.obs.relayOutbox.Start(ctx)
	n, err := s.relayOutbox(ctx, pub, topic, batch)
	return n, call.End(err)
}

func (s *Service) relayOutbox(ctx context.Context, pub outbox.Publisher, topic string, batch int) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("%w: batch %d", ErrInvalid, batch)
	}
	total := 0
	for _, db := range s.dbs {
		n, err := s.relayDB(ctx, db, pub, topic, batch)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (s *Service) relayDB(ctx context.Context, db *sqlx.DB, pub outbox.Publisher, topic string, batch int) (int, error) {
	sent := 0
	// READ COMMITTED: no gap locks, so relays claiming disjoint rows never
	// deadlock on the index gaps — a deadlock would roll back a batch
	// already published and publish it again.
	var opts *sql.TxOptions
	if s.isMySQL() {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	err := sqlutil.InTxOpts(ctx, db, opts, func(tx *sqlx.Tx) error {
		var rows []struct {
			ID      int64  `db:"id"`
			OrderID int64  `db:"order_id"`
			Payload string `db:"payload"`
		}
		lock := ""
		if s.isMySQL() {
			lock = " FOR UPDATE SKIP LOCKED"
		}
		if err := tx.SelectContext(ctx, &rows, `SELECT id, order_id, payload FROM order_outbox WHERE sent_at = 0 ORDER BY id LIMIT ?`+lock, batch); err != nil {
			return fmt.Errorf("order: read outbox: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		msgs := make([]outbox.Message, len(rows))
		ids := make([]any, len(rows))
		for i, r := range rows {
			msgs[i] = outbox.Message{Topic: topic, Key: strconv.AppendInt(nil, r.OrderID, 10), Value: []byte(r.Payload)}
			ids[i] = r.ID
		}
		if err := pub.Publish(ctx, msgs); err != nil {
			return fmt.Errorf("order: publish outbox: %w", err)
		}
		q, args, err := sqlx.In(`UPDATE order_outbox SET sent_at = ? WHERE id IN (?)`, s.now(), ids)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("order: mark outbox sent: %w", err)
		}
		sent = len(rows)
		return nil
	})
	return sent, err
}

// PendingEvents counts outbox events not yet relayed, over every database.
func (s *Service) PendingEvents(ctx context.Context) (int64, error) {
	ctx, call := s.obs.pendingEvents.Start(ctx)
	n, err := s.pendingEvents(ctx)
	return n, call.End(err)
}

func (s *Service) pendingEvents(ctx context.Context) (int64, error) {
	var total int64
	for _, db := range s.dbs {
		var n int64
		if err := db.GetContext(ctx, &n, `SELECT COUNT(*) FROM order_outbox WHERE sent_at = 0`); err != nil {
			return 0, fmt.Errorf("order: count outbox: %w", err)
		}
		total += n
	}
	return total, nil
}
