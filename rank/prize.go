package rank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
)

// ErrBadPrize is returned by DecodePrize for anything that is not a prize
// message of this version; it is marked outbox.ErrPoison.
var ErrBadPrize = errors.New("rank: bad prize message")

// PrizeVersion is the format version of the prize messages Freeze writes.
const PrizeVersion = 1

// Prize is the outbox message of one frozen member, keyed by member, as
// JSON:
//
//	{"v":1,"id":"game/weekly:2026-W49/alice","namespace":"game","board":"weekly:2026-W49","member":"alice","rank":1,"place":1,"score":300,"of":10,"at":1764480000000}
//
// ID is namespace, board and member, each path-escaped (url.PathEscape),
// joined by "/": unique per namespace, board and member. Delivery is
// at-least-once, so consumers de-duplicate on it.
type Prize struct {
	V         int    `json:"v"`
	ID        string `json:"id"`
	Namespace string `json:"namespace,omitempty"`
	Board     string `json:"board"`
	Member    string `json:"member"`
	Rank      int64  `json:"rank"`
	Place     int64  `json:"place"`
	Score     int64  `json:"score"`
	Of        int    `json:"of"` // entries frozen
	At        int64  `json:"at"` // freeze time, Unix ms
}

// DecodePrize parses a prize message value.
func DecodePrize(value []byte) (Prize, error) {
	var p Prize
	if err := strictjson.Decode(value, &p); err != nil {
		return Prize{}, outbox.Poison(fmt.Errorf("%w: %w", ErrBadPrize, err))
	}
	if p.V != PrizeVersion || p.Board == "" || p.Member == "" || p.ID != prizeID(p.Namespace, p.Board, p.Member) ||
		p.Rank < 1 || p.Place < p.Rank || p.Of < int(p.Place) {
		return Prize{}, outbox.Poison(fmt.Errorf("%w: %q", ErrBadPrize, value))
	}
	return p, nil
}

func prizeID(namespace, board, member string) string {
	return url.PathEscape(namespace) + "/" + url.PathEscape(board) + "/" + url.PathEscape(member)
}

// RelayPrizes publishes the freezer's namespace's unsent prize messages to topic, keyed by member, at
// most batch per call, and marks them sent; it returns how many it
// published. Rows are claimed with SELECT … FOR UPDATE SKIP LOCKED on MySQL,
// so relays run side by side on disjoint rows. A relay that dies between
// the publisher's acknowledgement and the mark publishes those rows again:
// delivery is at-least-once (consumers de-duplicate on Prize.ID).
func (f *Freezer) RelayPrizes(ctx context.Context, pub outbox.Publisher, topic string, batch int) (_ int, err error) {
	ctx, call := f.obs.relayPrizes.Start(ctx)
	defer func() { err = call.End(err) }()
	if batch < 1 || pub == nil {
		return 0, fmt.Errorf("%w: relay batch %d, publisher %v", ErrInvalid, batch, pub)
	}
	var opts *sql.TxOptions
	lock := ""
	if f.mysql {
		// READ COMMITTED: no gap locks, so relays on disjoint rows never
		// deadlock (a deadlock would roll back a batch already published).
		opts, lock = &sql.TxOptions{Isolation: sql.LevelReadCommitted}, " FOR UPDATE SKIP LOCKED"
	}
	sent := 0
	err = sqlutil.InTxOpts(ctx, f.db, opts, func(tx *sqlx.Tx) error {
		var rows []struct {
			ID      int64  `db:"id"`
			Member  string `db:"member"`
			Payload string `db:"payload"`
		}
		if err := tx.SelectContext(ctx, &rows, `SELECT id, member, payload FROM rank_prize_outbox WHERE namespace = ? AND sent_at = 0 ORDER BY id LIMIT ?`+lock, f.ns, batch); err != nil {
			return fmt.Errorf("rank: read prize outbox: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		msgs := make([]outbox.Message, len(rows))
		ids := make([]any, len(rows))
		for i, r := range rows {
			msgs[i] = outbox.Message{Topic: topic, Key: []byte(r.Member), Value: []byte(r.Payload)}
			ids[i] = r.ID
		}
		if err := pub.Publish(ctx, msgs); err != nil {
			return fmt.Errorf("rank: publish prizes: %w", err)
		}
		q, args, err := sqlx.In(`UPDATE rank_prize_outbox SET sent_at = ? WHERE id IN (?)`, f.now().UnixMilli(), ids)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("rank: mark prizes sent: %w", err)
		}
		sent = len(rows)
		return nil
	})
	return sent, err
}
