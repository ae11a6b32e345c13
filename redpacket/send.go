package redpacket

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// SendRequest asks to put Total fen into a packet of Count shares.
type SendRequest struct {
	Sender string
	// RequestID makes the send idempotent per sender (1..64 printable
	// ASCII): sending again with it returns the first packet, debits once.
	RequestID string
	Total     int64  // fen, Count..MaxTotal
	Count     int    // 1..MaxCount; 1 when there is a Recipient
	Kind      Kind   // Random (default) or Fixed
	Recipient string // the only user who may open it, or "" for anyone
	Greeting  string // up to 255 bytes
}

// Packet is a red packet as recorded in SQL.
type Packet struct {
	ID            int64  `db:"id" json:"id"`
	Sender        string `db:"sender" json:"sender"`
	RequestID     string `db:"request_id" json:"request_id"`
	Kind          Kind   `db:"kind" json:"kind"`
	Total         int64  `db:"total" json:"total"`
	Count         int    `db:"count" json:"count"`
	Recipient     string `db:"recipient" json:"recipient,omitempty"` // "" for anyone
	Greeting      string `db:"greeting" json:"greeting"`
	Status        string `db:"status" json:"status"` // open, refunded
	ClaimedCount  int    `db:"claimed_count" json:"claimed_count"`
	ClaimedAmount int64  `db:"claimed_amount" json:"claimed_amount"`
	Refund        int64  `db:"refund" json:"refund"`
	CreatedAt     int64  `db:"created_at" json:"created_at"` // Unix ms
	ExpiresAt     int64  `db:"expires_at" json:"expires_at"`
	Shares        string `db:"shares" json:"-"` // the split, as drawn at send (JSON)
}

// Packet statuses.
const (
	StatusOpen     = "open"
	StatusRefunded = "refunded"
)

const packetSelect = `SELECT id, sender, request_id, kind, total, count, recipient, greeting, status, claimed_count, claimed_amount, refund, created_at, expires_at, shares FROM `

var (
	//go:embed create.lua
	createLua    string
	createScript = redis.NewScript(createLua)
)

// Deposit adds amount fen to user's wallet (a top-up).
func (s *Service) Deposit(ctx context.Context, user string, amount int64) error {
	ctx, call := s.obs.deposit.Start(ctx)
	return call.End(s.deposit(ctx, user, amount))
}

func (s *Service) deposit(ctx context.Context, user string, amount int64) error {
	if err := validUser(user); err != nil {
		return err
	}
	if amount < 1 || amount > s.cfg.MaxTotal*1000 {
		return fmt.Errorf("%w: deposit of %d", ErrInvalid, amount)
	}
	return inTx(ctx, s.shardOfUser(user).DB, func(tx *sqlx.Tx) error {
		return s.credit(ctx, tx, s.shardOfUser(user), user, amount)
	})
}

// credit adds amount to user's wallet in sh, inside tx.
func (s *Service) credit(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, user string, amount int64) error {
	q := `INSERT INTO ` + gene.Sibling(sh, "rp_wallets") + ` (user_id, balance) VALUES (?, ?) ON CONFLICT (user_id) DO UPDATE SET balance = balance + excluded.balance`
	if sqlutil.IsMySQL(sh.DB) {
		q = `INSERT INTO ` + gene.Sibling(sh, "rp_wallets") + ` (user_id, balance) VALUES (?, ?) ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance)`
	}
	if _, err := tx.ExecContext(ctx, q, user, amount); err != nil {
		return fmt.Errorf("redpacket: credit %s: %w", user, err)
	}
	return nil
}

// Balance returns user's wallet balance in fen.
func (s *Service) Balance(ctx context.Context, user string) (int64, error) {
	ctx, call := s.obs.balance.Start(ctx)
	sh := s.shardOfUser(user)
	var n int64
	err := sh.DB.GetContext(ctx, &n, `SELECT COALESCE(SUM(balance), 0) FROM `+gene.Sibling(sh, "rp_wallets")+` WHERE user_id = ?`, user)
	if err != nil {
		return 0, call.End(fmt.Errorf("redpacket: balance of %s: %w", user, err))
	}
	return n, call.End(nil)
}

func (s *Service) validate(r *SendRequest) error {
	if r.Kind == "" {
		r.Kind = Random
	}
	switch {
	case validUser(r.Sender) != nil:
		return validUser(r.Sender)
	case validUser(r.RequestID) != nil:
		return fmt.Errorf("%w: request id %q", ErrInvalid, r.RequestID)
	case r.Recipient != "" && validUser(r.Recipient) != nil:
		return validUser(r.Recipient)
	case r.Count < 1 || r.Count > s.cfg.MaxCount:
		return fmt.Errorf("%w: %d shares (1..%d)", ErrInvalid, r.Count, s.cfg.MaxCount)
	case r.Recipient != "" && r.Count != 1:
		return fmt.Errorf("%w: %d shares for one recipient, who can take one", ErrInvalid, r.Count)
	case r.Total < int64(r.Count) || r.Total > s.cfg.MaxTotal:
		return fmt.Errorf("%w: %d fen for %d shares (at least 1 fen each, at most %d)", ErrInvalid, r.Total, r.Count, s.cfg.MaxTotal)
	case len(r.Greeting) > 255:
		return fmt.Errorf("%w: greeting of %d bytes", ErrInvalid, len(r.Greeting))
	}
	return nil
}

// Send debits the sender, records the packet with its shares drawn now
// (the randomness is Go's, never Redis'), in one SQL transaction, then opens
// it in Redis. If Redis fails after the commit, the money is safe in the
// packet — a repeat of the request opens it, and at worst it is refunded at
// expiry — and the error says so.
func (s *Service) Send(ctx context.Context, r SendRequest) (Packet, error) {
	ctx, call := s.obs.send.Start(ctx)
	p, err := s.send(ctx, r)
	return p, call.End(err)
}

func (s *Service) send(ctx context.Context, r SendRequest) (Packet, error) {
	if err := s.validate(&r); err != nil {
		return Packet{}, err
	}
	sh := s.shardOfUser(r.Sender)
	p, err := s.byRequest(ctx, sh, r.Sender, r.RequestID)
	if errors.Is(err, ErrNotFound) {
		p, err = s.insert(ctx, sh, r)
	}
	if err != nil {
		return Packet{}, err
	}
	if p.Status == StatusOpen {
		if _, err := s.open(ctx, p); err != nil {
			return p, fmt.Errorf("redpacket: packet %d is recorded and paid for, but not open in Redis (send again with the same request id): %w", p.ID, err)
		}
	}
	return p, nil
}

func (s *Service) insert(ctx context.Context, sh shard.Shard, r SendRequest) (Packet, error) {
	shares, err := Split(r.Kind, r.Total, r.Count, s.cfg.Intn)
	if err != nil {
		return Packet{}, err
	}
	sharesJSON, _ := json.Marshal(shares) // ints: cannot fail
	id, err := s.newID(ctx, r.Sender)
	if err != nil {
		return Packet{}, err
	}
	now := s.cfg.Now()
	p := Packet{ID: id, Sender: r.Sender, RequestID: r.RequestID, Kind: r.Kind, Total: r.Total, Count: r.Count, Recipient: r.Recipient,
		Greeting: r.Greeting, Status: StatusOpen, CreatedAt: now.UnixMilli(), ExpiresAt: now.Add(s.cfg.Expiry).UnixMilli(), Shares: string(sharesJSON)}
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE `+gene.Sibling(sh, "rp_wallets")+` SET balance = balance - ? WHERE user_id = ? AND balance >= ?`, r.Total, r.Sender, r.Total)
		if err != nil {
			return fmt.Errorf("redpacket: debit %s: %w", r.Sender, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %s has less than %d fen", ErrInsufficientFunds, r.Sender, r.Total)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO `+sh.Table+` (id, sender, request_id, kind, total, count, shares, recipient, greeting, status,
			claimed_count, claimed_amount, refund, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?, ?)`,
			p.ID, p.Sender, p.RequestID, string(p.Kind), p.Total, p.Count, p.Shares, p.Recipient, p.Greeting, p.Status, p.CreatedAt, p.ExpiresAt)
		return err
	})
	if sqlutil.IsDuplicate(err) { // a concurrent twin of the request won
		return s.byRequest(ctx, sh, r.Sender, r.RequestID)
	}
	if err != nil {
		return Packet{}, err
	}
	return p, nil
}

// open creates p's live state in Redis, idempotently: a packet open
// already, or closed by its refund, is left as it is, and open tells
// whether it created the state. One whose state Redis lost is reopened
// with the claims SQL holds and only the shares SQL has not seen claimed
// (claims Redis had accepted but not yet relayed are lost with that state).
func (s *Service) open(ctx context.Context, p Packet) (bool, error) {
	shares, err := p.drawn()
	if err != nil {
		return false, err
	}
	claims, err := s.claims(ctx, p.ID)
	if err != nil {
		return false, err
	}
	taken := map[int]bool{}
	var pairs []any
	for _, c := range claims {
		taken[c.Index] = true
		pairs = append(pairs, "u:"+c.User, shareItem(c.Index, c.Amount))
	}
	state, list := s.packetKeys(p.ID)
	var left []any // "<draw index>:<fen>", so a claim records which share it took
	for i, v := range shares {
		if !taken[i+1] {
			left = append(left, shareItem(i+1, v))
		}
	}
	args := append([]any{p.ExpiresAt, p.Recipient, s.keep(p), p.Count, len(left)}, left...)
	args = append(args, pairs...)
	created, err := createScript.Run(ctx, s.rdb, []string{state, list}, args...).Int()
	if err != nil {
		return false, err
	}
	return created == 1, nil
}

// keep is how long p's Redis state lives from now (ms): past its expiry by
// the grace and a day, so that a late refund still finds its claims.
func (s *Service) keep(p Packet) int64 {
	return max(1, time.UnixMilli(p.ExpiresAt).Add(s.cfg.LostStateGrace+24*time.Hour).Sub(s.cfg.Now()).Milliseconds())
}

// shareItem is how Redis holds a share: "<draw index>:<fen>".
func shareItem(index int, fen int64) string {
	return strconv.Itoa(index) + ":" + strconv.FormatInt(fen, 10)
}

// drawn returns p's shares as drawn at send, in draw order.
func (p Packet) drawn() ([]int64, error) {
	var shares []int64
	if err := json.Unmarshal([]byte(p.Shares), &shares); err != nil || len(shares) != p.Count {
		return nil, fmt.Errorf("redpacket: packet %d has unreadable shares (%d of %d): %v", p.ID, len(shares), p.Count, err)
	}
	return shares, nil
}

func (s *Service) byRequest(ctx context.Context, sh shard.Shard, sender, request string) (Packet, error) {
	var p Packet
	err := sh.DB.GetContext(ctx, &p, packetSelect+sh.Table+` WHERE sender = ? AND request_id = ?`, sender, request)
	if errors.Is(err, sql.ErrNoRows) {
		return Packet{}, fmt.Errorf("%w: request %s of %s", ErrNotFound, request, sender)
	}
	if err != nil {
		return Packet{}, fmt.Errorf("redpacket: read packet: %w", err)
	}
	return p, nil
}

// Get returns packet id from its shard (the hot tables, then the archive).
func (s *Service) Get(ctx context.Context, id int64) (Packet, error) {
	ctx, call := s.obs.get.Start(ctx)
	p, err := s.get(ctx, id)
	return p, call.End(err)
}

func (s *Service) get(ctx context.Context, id int64) (Packet, error) {
	if err := validPacket(id); err != nil {
		return Packet{}, err
	}
	sh := s.shardOfPacket(id)
	return s.load(ctx, sh.DB, sh, id)
}

// querier is what reads need from a pool or a transaction.
type querier interface {
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

func (s *Service) load(ctx context.Context, q querier, sh shard.Shard, id int64) (Packet, error) {
	for _, table := range []string{sh.Table, gene.Sibling(sh, "rp_packets_archive")} {
		var p Packet
		err := q.GetContext(ctx, &p, packetSelect+table+` WHERE id = ?`, id)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Packet{}, fmt.Errorf("redpacket: read packet %d: %w", id, err)
		}
	}
	return Packet{}, fmt.Errorf("%w: %s", ErrNotFound, strconv.FormatInt(id, 10))
}
