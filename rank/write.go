package rank

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	//go:embed remove_packed.lua
	removePackedLua    string
	removePackedScript = redis.NewScript(removePackedLua)
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
	// A call with no Increment leaves no reply, so its request key is
	// never touched: it needs no fresh id.
	id := "-"
	if u.Mode == Increment {
		id = newRequestID()
	}
	scores, err := b.apply(ctx, id, false, []Update{u})
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
	w := writing{b: b, now: now, requestID: requestID, replay: replay, updates: updates}
	scores := make([]int64, len(updates))
	var rejected []int
	calls := w.group()
	for {
		cmds := runCalls(ctx, b.c, w.calls(l, calls))
		var stale []shardCall
		for i, cmd := range cmds {
			err := cmd.Err()
			if isMismatch(err) && l == EncodingPacked {
				// A Migrate switched the shard: nothing was applied there.
				stale = append(stale, calls[i])
				continue
			}
			if isMismatch(err) {
				return nil, fmt.Errorf("%w: %v", ErrEncodingMismatch, err)
			}
			if err != nil {
				return nil, fmt.Errorf("rank: write %s: %w", b.cfg.Name, err)
			}
			vals, err := cmd.Slice()
			if err != nil || len(vals) != len(calls[i].pos) {
				return nil, fmt.Errorf("rank: write %s: unexpected reply %v: %v", b.cfg.Name, cmd.Val(), err)
			}
			for j, v := range vals {
				score, ok, err := b.writeReply(l, v)
				if err != nil {
					return nil, fmt.Errorf("rank: write %s: %w", b.cfg.Name, err)
				}
				scores[calls[i].pos[j]] = score
				if !ok {
					rejected = append(rejected, calls[i].pos[j])
				}
			}
		}
		if len(stale) == 0 {
			break
		}
		// Send the refused calls again, in the new encoding and in their
		// order: a shard's switch is one atomic step, so once one of its
		// calls was refused, its later ones were too.
		if l, err = b.switched(ctx); err != nil {
			return nil, err
		}
		calls = stale
	}
	if len(rejected) > 0 {
		slices.Sort(rejected)
		return scores, &RejectedError{Updates: rejected, Of: len(updates)}
	}
	return scores, nil
}

// runCalls runs calls as luascript.RunAll does, and a single one as one
// EVALSHA rather than a pipeline of one, which costs the client more.
func runCalls(ctx context.Context, c redis.UniversalClient, calls []luascript.Call) []*redis.Cmd {
	if len(calls) == 1 {
		return []*redis.Cmd{calls[0].Script.Run(ctx, c, calls[0].Keys, calls[0].Args...)}
	}
	cmds, _ := luascript.RunAll(ctx, c, calls)
	return cmds
}

// switched re-reads the encoding of a packed board that a script found
// switched by Migrate; it is EncodingMember, or the board is refused.
func (b *Board) switched(ctx context.Context) (Encoding, error) {
	b.layout.CompareAndSwap(int32(EncodingPacked), int32(EncodingAuto))
	l, err := b.ready(ctx)
	if err == nil && l != EncodingMember {
		err = fmt.Errorf("%w: %s changed encoding during the call", ErrEncodingMismatch, b.cfg.Name)
	}
	return l, err
}

func isMismatch(err error) bool {
	return err != nil && strings.Contains(err.Error(), "rank: encoding mismatch")
}

// writing is one Apply's updates on their way to the shards.
type writing struct {
	b         *Board
	now       time.Time
	requestID string
	replay    bool
	updates   []Update
}

// shardCall is the updates one script call carries to one shard.
type shardCall struct {
	shard int
	seq   int   // the call's number among the request's calls to the shard
	pos   []int // the updates' positions in the Apply
	adds  bool  // whether it holds an Increment
}

// group splits the updates by shard, in order, chunk at most per call.
func (w *writing) group() []shardCall {
	open := map[int]int{} // shard → its call being filled
	sent := map[int]int{} // calls per shard so far
	var out []shardCall
	for i, u := range w.updates {
		s := w.b.shardOf(u.Member)
		j, ok := open[s]
		if !ok {
			j = len(out)
			open[s] = j
			out = append(out, shardCall{shard: s, seq: sent[s]})
			sent[s]++
		}
		out[j].pos = append(out[j].pos, i)
		out[j].adds = out[j].adds || u.Mode == Increment
		if len(out[j].pos) == chunk {
			delete(open, s)
		}
	}
	return out
}

// calls are the script calls of cs in encoding l.
func (w *writing) calls(l Encoding, cs []shardCall) []luascript.Call {
	b := w.b
	var head []any
	script, keep := writeMemberScript, 4 // keep: the replay window's place in head
	if l == EncodingPacked {
		script, keep = writeScript, 5
		tick := w.now.Sub(b.cfg.Epoch) / b.cfg.Resolution
		copied := prefixOf(b.cfg.Epoch.Add(tick * b.cfg.Resolution).UnixNano())
		head = []any{b.packed.span, b.packed.maxScore, b.rest(w.now), b.packed.expireMs, b.packed.id, int64(0), copied}
	} else {
		head = []any{int64(maxScore), b.prefix(w.now), b.expireMs, b.memberID, int64(0)}
	}
	out := make([]luascript.Call, len(cs))
	for i, c := range cs {
		args := append(make([]any, 0, len(head)+3*len(c.pos)), head...)
		if w.replay || c.adds {
			args[keep] = ReplayWindow.Milliseconds()
		}
		for _, p := range c.pos {
			u := w.updates[p]
			v := u.Value
			if l == EncodingMember {
				v *= b.sign
			}
			args = append(args, string(u.Mode), u.Member, v)
		}
		// Each of a request's calls to a shard (one per chunk, in update
		// order) has a request key of its own.
		req := b.space.Key(b.tags[c.shard], "req", w.requestID, strconv.Itoa(c.seq))
		ks := []string{b.shards[c.shard], b.encoded[c.shard], req}
		if l == EncodingMember {
			ks = append(ks, b.ties[c.shard])
		} else {
			m := b.mig[c.shard]
			ks = append(ks, m.state, m.rank, m.ties)
		}
		out[i] = luascript.Call{Script: script, Keys: ks, Args: args}
	}
	return out
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
	byShard := map[int][]any{}
	for _, m := range members {
		s := b.shardOf(m)
		byShard[s] = append(byShard[s], m)
	}
	shards := slices.Sorted(maps.Keys(byShard))
	for len(shards) > 0 {
		calls := make([]luascript.Call, len(shards))
		for i, s := range shards {
			calls[i] = b.removeCall(l, s, byShard[s])
		}
		cmds, _ := luascript.RunAll(ctx, b.c, calls)
		var stale []int
		for i, cmd := range cmds {
			err := cmd.Err()
			switch {
			case isMismatch(err) && l == EncodingPacked:
				stale = append(stale, shards[i]) // switched by Migrate: remove there as EncodingMember
			case isMismatch(err):
				return fmt.Errorf("%w: %v", ErrEncodingMismatch, err)
			case err != nil:
				return fmt.Errorf("rank: remove from %s: %w", b.cfg.Name, err)
			}
		}
		if len(stale) > 0 {
			if l, err = b.switched(ctx); err != nil {
				return err
			}
		}
		shards = stale
	}
	return nil
}

// removeCall is the script call that removes names from shard s.
func (b *Board) removeCall(l Encoding, s int, names []any) luascript.Call {
	if l == EncodingPacked {
		m := b.mig[s]
		return luascript.Call{
			Script: removePackedScript,
			Keys:   []string{b.shards[s], b.meta[s], b.encoded[s], m.rank, m.ties},
			Args:   append([]any{b.packed.id}, names...),
		}
	}
	return luascript.Call{Script: removeMemberScript, Keys: []string{b.shards[s], b.ties[s], b.meta[s]}, Args: names}
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
