package rank

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/casebook-dev/casebook/internal/luascript"
)

// Mode says how an Update combines with the member's current score.
type Mode byte

const (
	Replace   Mode = 's' // the score becomes Value
	Increment Mode = 'a' // Value is added (it may be negative)
	KeepBest  Mode = 'b' // the score becomes Value if that is higher
)

// Update is one score change.
type Update struct {
	Member string
	Mode   Mode
	Value  int64
}

// maxMember bounds member names; Redis allows more, but a leaderboard member
// is an id, and bounded names keep cursors small.
const maxMember = 256

// Set replaces member's score and returns it. Setting the score a member
// already has keeps the time it first reached it.
func (b *Board) Set(ctx context.Context, member string, score int64) (int64, error) {
	return b.one(ctx, Update{Member: member, Mode: Replace, Value: score})
}

// Add adds delta to member's score (a new member starts at 0) and returns
// the new score.
func (b *Board) Add(ctx context.Context, member string, delta int64) (int64, error) {
	return b.one(ctx, Update{Member: member, Mode: Increment, Value: delta})
}

// Best raises member's score to score if that is higher and returns the
// score afterwards.
func (b *Board) Best(ctx context.Context, member string, score int64) (int64, error) {
	return b.one(ctx, Update{Member: member, Mode: KeepBest, Value: score})
}

func (b *Board) one(ctx context.Context, u Update) (int64, error) {
	scores, err := b.Apply(ctx, []Update{u})
	if err != nil {
		return 0, err
	}
	return scores[0], nil
}

// chunk bounds the updates one script call carries, so one call never holds
// a Redis shard for long.
const chunk = 256

// ReplayWindow is how long a write's reply is kept beside its shard, so that
// the same request sent again within it (go-redis retrying a command whose
// reply was lost, or ApplyOnce called again with the same id) returns the
// first answer and changes nothing. It costs one small key per script call
// for that long.
const ReplayWindow = 30 * time.Second

// Apply performs updates in order, pipelined: one script call per shard per
// 256 updates, all in one round trip. It returns each member's score after
// its update. Updates that would leave 0..MaxScore are not applied; their
// score is -1 and the error wraps ErrScoreRange. Invalid input (an empty
// member, an unknown mode) fails the whole call before anything is sent.
//
// Each call carries a fresh request id, so a client that retries it after a
// lost reply applies it once. To retry a failed Apply yourself without
// adding twice, use ApplyOnce.
func (b *Board) Apply(ctx context.Context, updates []Update) ([]int64, error) {
	return b.ApplyOnce(ctx, newRequestID(), updates)
}

// ApplyOnce is Apply under the caller's request id (1..64 bytes): calling
// it again with the same id and updates within ReplayWindow returns the
// first call's scores and changes nothing. Use it to retry a write whose
// outcome is unknown (a timeout), e.g. with the id of the event that caused
// it.
func (b *Board) ApplyOnce(ctx context.Context, requestID string, updates []Update) ([]int64, error) {
	if requestID == "" || len(requestID) > 64 {
		return nil, fmt.Errorf("rank: request id must be 1..64 bytes, got %d", len(requestID))
	}
	rest, err := b.rest(b.cfg.Now())
	if err != nil {
		return nil, err
	}
	for _, u := range updates {
		if err := b.validate(u); err != nil {
			return nil, err
		}
	}
	// Group by shard, keeping each update's position for the answer.
	type pending struct {
		args []any
		pos  []int
	}
	head := []any{b.span, b.maxScore, rest, b.expireMs, b.encoding, ReplayWindow.Milliseconds()}
	byShard := map[int]*pending{}
	sent := map[int]int{} // script calls per shard so far
	var calls []luascript.Call
	var positions [][]int
	flush := func(shard int, p *pending) {
		// Each of a request's calls to a shard (one per chunk, in update
		// order) has a request key of its own.
		req := b.space.Key(b.tags[shard], "req", requestID, strconv.Itoa(sent[shard]))
		sent[shard]++
		calls = append(calls, luascript.Call{Script: writeScript, Keys: []string{b.shards[shard], b.encoded[shard], req}, Args: p.args})
		positions = append(positions, p.pos)
	}
	for i, u := range updates {
		s := b.shardOf(u.Member)
		p := byShard[s]
		if p == nil {
			p = &pending{args: append([]any(nil), head...)}
			byShard[s] = p
		}
		p.args = append(p.args, string(u.Mode), u.Member, u.Value)
		p.pos = append(p.pos, i)
		if len(p.pos) == chunk {
			flush(s, p)
			delete(byShard, s)
		}
	}
	for s, p := range byShard {
		flush(s, p)
	}
	cmds, err := luascript.RunAll(ctx, b.c, calls)
	if err != nil && strings.Contains(err.Error(), "rank: encoding mismatch") {
		return nil, fmt.Errorf("%w: %v", ErrEncodingMismatch, err)
	}
	if err != nil {
		return nil, fmt.Errorf("rank: write %s: %w", b.cfg.Name, err)
	}
	scores := make([]int64, len(updates))
	rejected := 0
	for i, cmd := range cmds {
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) != len(positions[i]) {
			return nil, fmt.Errorf("rank: write %s: unexpected reply %v: %v", b.cfg.Name, cmd.Val(), err)
		}
		for j, v := range vals {
			scores[positions[i][j]] = v
			if v < 0 {
				rejected++
			}
		}
	}
	if rejected > 0 {
		return scores, fmt.Errorf("%w: %d of %d updates rejected (0..%d)", ErrScoreRange, rejected, len(updates), b.maxScore)
	}
	return scores, nil
}

func newRequestID() string {
	var id [16]byte
	rand.Read(id[:]) // never fails (crypto/rand)
	return hex.EncodeToString(id[:])
}

func (b *Board) validate(u Update) error {
	if u.Member == "" || len(u.Member) > maxMember {
		return fmt.Errorf("rank: member name must be 1..%d bytes, got %d", maxMember, len(u.Member))
	}
	switch u.Mode {
	case Replace, KeepBest:
		if u.Value < 0 || u.Value > b.maxScore {
			return fmt.Errorf("%w: %d (0..%d)", ErrScoreRange, u.Value, b.maxScore)
		}
	case Increment:
		if u.Value < -b.maxScore || u.Value > b.maxScore {
			return fmt.Errorf("%w: delta %d (±%d)", ErrScoreRange, u.Value, b.maxScore)
		}
	default:
		return errors.New("rank: unknown update mode " + strconv.Quote(string(u.Mode)))
	}
	return nil
}

// Remove takes members off the board, with their metadata.
func (b *Board) Remove(ctx context.Context, members ...string) error {
	pipe := b.c.Pipeline()
	for _, m := range members {
		s := b.shardOf(m)
		pipe.ZRem(ctx, b.shards[s], m)
		pipe.HDel(ctx, b.meta[s], m)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("rank: remove from %s: %w", b.cfg.Name, err)
	}
	return nil
}

// SetMeta stores a small opaque value (a display name, an avatar URL) beside
// member, returned by Meta.
func (b *Board) SetMeta(ctx context.Context, member, meta string) error {
	s := b.shardOf(member)
	pipe := b.c.Pipeline()
	pipe.HSet(ctx, b.meta[s], member, meta)
	if b.expireMs > 0 {
		pipe.PExpireAt(ctx, b.meta[s], msTime(b.expireMs))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("rank: set meta: %w", err)
	}
	return nil
}

// Meta returns the metadata of members that have any.
func (b *Board) Meta(ctx context.Context, members ...string) (map[string]string, error) {
	pipe := b.c.Pipeline()
	cmds := make([]interface{ Result() (string, error) }, len(members))
	for i, m := range members {
		cmds[i] = pipe.HGet(ctx, b.meta[b.shardOf(m)], m)
	}
	pipe.Exec(ctx)
	out := make(map[string]string, len(members))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if err == nil {
			out[members[i]] = v
		} else if !isNil(err) {
			return nil, fmt.Errorf("rank: meta: %w", err)
		}
	}
	return out, nil
}
