package rank

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
)

var (
	//go:embed write_member.lua
	writeMemberLua    string
	writeMemberScript = redis.NewScript(writeMemberLua)
	//go:embed remove_member.lua
	removeMemberLua    string
	removeMemberScript = redis.NewScript(removeMemberLua)
)

// Mode says how an Update combines with the member's current score.
type Mode byte

const (
	Replace   Mode = 's' // the score becomes Value
	Increment Mode = 'a' // Value is added (it may be negative)
	KeepBest  Mode = 'b' // the score becomes Value if that ranks better (higher, or lower on an Ascending board)
)

// Update is one score change.
type Update struct {
	Member string
	Mode   Mode
	Value  int64
}

// RejectedError is returned by Apply when some updates would have left
// MinScore..MaxScore: those were not applied, the others were. It wraps
// ErrScoreRange.
type RejectedError struct {
	Updates []int // positions of the rejected updates in the call
	Of      int   // updates in the call
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%v: %d of %d updates rejected", ErrScoreRange, len(e.Updates), e.Of)
}

func (e *RejectedError) Unwrap() error { return ErrScoreRange }

// maxMember bounds member names; Redis allows more, but a leaderboard member
// is an id, and bounded names keep cursors small.
const maxMember = 256

// Set replaces member's score and returns it. Setting the score a member
// already has keeps the time it first reached it.
func (b *Board) Set(ctx context.Context, member string, score int64) (_ int64, err error) {
	ctx, call := b.obs.set.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.one(ctx, Update{Member: member, Mode: Replace, Value: score})
}

// Add adds delta to member's score (a new member starts at 0) and returns
// the new score.
func (b *Board) Add(ctx context.Context, member string, delta int64) (_ int64, err error) {
	ctx, call := b.obs.add.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.one(ctx, Update{Member: member, Mode: Increment, Value: delta})
}

// Best makes score member's score if it ranks better than the current one
// (higher; lower on an Ascending board) and returns the score afterwards.
func (b *Board) Best(ctx context.Context, member string, score int64) (_ int64, err error) {
	ctx, call := b.obs.best.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.one(ctx, Update{Member: member, Mode: KeepBest, Value: score})
}

func (b *Board) one(ctx context.Context, u Update) (int64, error) {
	scores, err := b.apply(ctx, newRequestID(), false, []Update{u})
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
// its update. Updates that would leave MinScore..MaxScore are not applied:
// their score is the member's unchanged one (0 when not on the board) and
// the error is a *RejectedError. Invalid input (an empty member, an unknown
// mode, a value out of range) fails the whole call before anything is sent.
//
// A script call that carries an Increment also carries a fresh request id
// and leaves its reply beside the shard for ReplayWindow, so a client that
// retries it after a lost reply adds once. Calls of Replace and KeepBest
// only leave no reply — a Set costs some 15% less than an Add for it
// (BenchmarkWrite) — because applying them twice gives the same scores; the trade-off is that such a retry,
// should another write to the member land between the lost reply and the
// retry, applies the older value again. To retry a failed Apply yourself
// without adding twice, use ApplyOnce.
func (b *Board) Apply(ctx context.Context, updates []Update) (_ []int64, err error) {
	ctx, call := b.obs.applyOp.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.apply(ctx, newRequestID(), false, updates)
}

// ApplyOnce is Apply under the caller's request id (1..64 bytes): calling
// it again with the same id and updates within ReplayWindow returns the
// first call's scores and changes nothing, whatever the modes. Use it to
// retry a write whose outcome is unknown (a timeout), e.g. with the id of
// the event that caused it.
func (b *Board) ApplyOnce(ctx context.Context, requestID string, updates []Update) (_ []int64, err error) {
	ctx, call := b.obs.applyOnce.Start(ctx)
	defer func() { err = call.End(err) }()
	if requestID == "" || len(requestID) > 64 {
		return nil, fmt.Errorf("%w: request id must be 1..64 bytes, got %d", ErrInvalid, len(requestID))
	}
	return b.apply(ctx, requestID, true, updates)
}

func (b *Board) apply(ctx context.Context, requestID string, replay bool, updates []Update) ([]int64, error) {
	l, err := b.ready(ctx)
	if err != nil {
		return nil, err
	}
	now := b.cfg.Now()
	if err := b.checkTime(now, l); err != nil {
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
		adds bool // whether the call holds an Increment
	}
	var head []any
	script, keep := writeMemberScript, 4 // keep: the replay window's place in head
	if l == EncodingPacked {
		script, keep = writeScript, 5
		head = []any{b.packed.span, b.packed.maxScore, b.rest(now), b.packed.expireMs, b.packed.id, int64(0)}
	} else {
		head = []any{int64(maxScore), b.prefix(now), b.expireMs, b.memberID, int64(0)}
	}
	byShard := map[int]*pending{}
	sent := map[int]int{} // script calls per shard so far
	var calls []luascript.Call
	var positions [][]int
	flush := func(shard int, p *pending) {
		// Each of a request's calls to a shard (one per chunk, in update
		// order) has a request key of its own.
		req := b.space.Key(b.tags[shard], "req", requestID, strconv.Itoa(sent[shard]))
		sent[shard]++
		if replay || p.adds {
			p.args[keep] = ReplayWindow.Milliseconds()
		}
		ks := []string{b.shards[shard], b.encoded[shard], req}
		if l == EncodingMember {
			ks = append(ks, b.ties[shard])
		}
		calls = append(calls, luascript.Call{Script: script, Keys: ks, Args: p.args})
		positions = append(positions, p.pos)
	}
	for i, u := range updates {
		s := b.shardOf(u.Member)
		p := byShard[s]
		if p == nil {
			p = &pending{args: append([]any(nil), head...)}
			byShard[s] = p
		}
		v := u.Value
		if l == EncodingMember {
			v *= b.sign
		}
		p.args = append(p.args, string(u.Mode), u.Member, v)
		p.pos = append(p.pos, i)
		p.adds = p.adds || u.Mode == Increment
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
	var rejected []int
	for i, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil || len(vals) != len(positions[i]) {
			return nil, fmt.Errorf("rank: write %s: unexpected reply %v: %v", b.cfg.Name, cmd.Val(), err)
		}
		for j, v := range vals {
			score, ok, err := b.writeReply(l, v)
			if err != nil {
				return nil, fmt.Errorf("rank: write %s: %w", b.cfg.Name, err)
			}
			scores[positions[i][j]] = score
			if !ok {
				rejected = append(rejected, positions[i][j])
			}
		}
	}
	if len(rejected) > 0 {
		return scores, &RejectedError{Updates: rejected, Of: len(updates)}
	}
	return scores, nil
}

// writeReply decodes one update's reply: the score after it, and whether it
// was applied.
func (b *Board) writeReply(l Encoding, v any) (int64, bool, error) {
	if l == EncodingPacked {
		n, ok := v.(int64)
		if !ok {
			return 0, false, fmt.Errorf("unexpected reply %v", v)
		}
		if n < 0 {
			return -1 - n, false, nil
		}
		return n, true, nil
	}
	s, _ := v.(string)
	applied := !strings.HasPrefix(s, "r")
	n, err := strconv.ParseInt(strings.TrimPrefix(s, "r"), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("unexpected reply %q", s)
	}
	return b.sign * n, applied, nil
}

func newRequestID() string {
	var id [16]byte
	rand.Read(id[:]) // never fails (crypto/rand)
	return hex.EncodeToString(id[:])
}

func (b *Board) validate(u Update) error {
	if err := validMember(u.Member); err != nil {
		return err
	}
	lo, hi := b.MinScore(), b.MaxScore()
	switch u.Mode {
	case Replace, KeepBest:
		if u.Value < lo || u.Value > hi {
			return fmt.Errorf("%w: %d (%d..%d)", ErrScoreRange, u.Value, lo, hi)
		}
	case Increment:
		if u.Value < -hi || u.Value > hi {
			return fmt.Errorf("%w: delta %d (±%d)", ErrScoreRange, u.Value, hi)
		}
	default:
		return errors.New("rank: unknown update mode " + strconv.Quote(string(u.Mode)))
	}
	return nil
}

func validMember(m string) error {
	if m == "" || len(m) > maxMember {
		return fmt.Errorf("%w: member name must be 1..%d bytes, got %d", ErrInvalid, maxMember, len(m))
	}
	return nil
}

// Remove takes members off the board, with their metadata.
func (b *Board) Remove(ctx context.Context, members ...string) (err error) {
	ctx, call := b.obs.remove.Start(ctx)
	defer func() { err = call.End(err) }()
	for _, m := range members {
		if err := validMember(m); err != nil {
			return err
		}
	}
	l, err := b.ready(ctx)
	if err != nil {
		return err
	}
	if l == EncodingPacked {
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
	byShard := map[int][]any{}
	for _, m := range members {
		s := b.shardOf(m)
		byShard[s] = append(byShard[s], m)
	}
	var calls []luascript.Call
	for s, names := range byShard {
		calls = append(calls, luascript.Call{Script: removeMemberScript, Keys: []string{b.shards[s], b.ties[s], b.meta[s]}, Args: names})
	}
	if _, err := luascript.RunAll(ctx, b.c, calls); err != nil {
		return fmt.Errorf("rank: remove from %s: %w", b.cfg.Name, err)
	}
	return nil
}

// SetMeta stores a small opaque value (a display name, an avatar URL) beside
// member, returned by Meta.
func (b *Board) SetMeta(ctx context.Context, member, meta string) (err error) {
	ctx, call := b.obs.setMeta.Start(ctx)
	defer func() { err = call.End(err) }()
	s := b.shardOf(member)
	pipe := b.c.Pipeline()
	pipe.HSet(ctx, b.meta[s], member, meta)
	if ms := b.expiry(); ms > 0 {
		pipe.PExpireAt(ctx, b.meta[s], msTime(ms))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("rank: set meta: %w", err)
	}
	return nil
}

// Meta returns the metadata of members that have any.
func (b *Board) Meta(ctx context.Context, members ...string) (_ map[string]string, err error) {
	ctx, call := b.obs.meta.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.metaOf(ctx, members)
}

// metaOf is Meta's work.
func (b *Board) metaOf(ctx context.Context, members []string) (map[string]string, error) {
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
