package rank

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/luascript"
	"github.com/casebook-dev/casebook/internal/obs"
)

var (
	//go:embed lookup_many.lua
	lookupManyLua    string
	lookupManyScript = redis.NewScript(lookupManyLua)
	//go:embed counts.lua
	countsLua    string
	countsScript = redis.NewScript(orderLua + countsLua)
)

// Standing is a member's entry on a board and its place among the members
// RankIn was asked about.
type Standing struct {
	Entry
	Place int64 `json:"place"` // 1-based, in board order, among the asked members on the board
}

// maxRankIn bounds RankIn's members: a friends list, not a board.
const maxRankIn = 1000

// RankIn returns the standings of members (a friends board: up to 1,000
// names) in board order: each one on the board with its global entry and
// rank, as Rank gives it, and its Place among them. Members not on the
// board are left out; a name given twice counts once.
//
// Cost: two round trips, whatever the number of members — one script call
// per shard holding any of them (their stored forms), then one per shard
// (counts.lua: the entries ranked before each of them, O(log² n) each),
// pipelined. Competition ranks come with those counts; Dense ranks list the
// distinct scores better than the lowest of the members, once, at Rank's
// Dense cost.
func (b *Board) RankIn(ctx context.Context, members []string) (_ []Standing, err error) {
	ctx, call := b.obs.rankIn.Start(ctx)
	defer func() { err = call.End(err) }()
	if len(members) > maxRankIn {
		return nil, fmt.Errorf("%w: rank of %d members, at most %d", ErrInvalid, len(members), maxRankIn)
	}
	for _, m := range members {
		if err := validMember(m); err != nil {
			return nil, err
		}
	}
	var out []Standing
	err = b.settled(ctx, func(l Encoding) (err error) {
		out, err = b.rankIn(ctx, l, members)
		return err
	})
	return out, err
}

// rankIn is RankIn's work, in encoding l.
func (b *Board) rankIn(ctx context.Context, l Encoding, members []string) ([]Standing, error) {
	found, err := b.lookupAll(ctx, l, members)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	ahead := make([]int64, len(found))
	above := make([]int64, len(found))
	args := make([]any, 0, 2*len(found))
	for _, e := range found {
		args = append(args, e.value, e.key)
	}
	q := newBatch(ctx)
	for i := range b.shards {
		q.add(luascript.Call{Script: countsScript, Keys: []string{b.shards[i]}, Args: args}, func(cmd *redis.Cmd) error {
			counts, err := cmd.Int64Slice()
			if err != nil || len(counts) != 2*len(found) {
				return fmt.Errorf("counts reply %v: %v", cmd.Val(), err)
			}
			for j := range found {
				ahead[j] += counts[2*j]
				above[j] += counts[2*j+1]
			}
			return nil
		})
	}
	if err := q.run(b.c); err != nil {
		return nil, fmt.Errorf("rank: rank in %s: %w", b.cfg.Name, err)
	}
	out := make([]Standing, len(found))
	for j, e := range found {
		e.ordinal = 1 + ahead[j]
		e.Rank = e.ordinal
		if b.cfg.Ties == Competition {
			e.Rank = 1 + above[j]
		}
		out[j] = Standing{Entry: e}
	}
	slices.SortFunc(out, func(x, y Standing) int { return cmp.Compare(x.ordinal, y.ordinal) })
	if b.cfg.Ties == Dense {
		better, err := b.distinctValuesAbove(ctx, out[len(out)-1].value)
		if err != nil {
			return nil, err
		}
		for j := range out {
			v := out[j].value
			out[j].Rank = 1 + int64(len(better)-sort.Search(len(better), func(i int) bool { return better[i] > v }))
		}
	}
	for j := range out {
		out[j].Place = int64(j + 1)
	}
	return out, nil
}

// lookupAll finds members on their shards, each name once, in one round
// trip: one lookup_many.lua call per shard holding any of them.
func (b *Board) lookupAll(ctx context.Context, l Encoding, members []string) ([]Entry, error) {
	byShard := map[int][]any{}
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m] {
			continue
		}
		seen[m] = true
		s := b.shardOf(m)
		if byShard[s] == nil {
			byShard[s] = []any{"member"}
			if l == EncodingPacked {
				byShard[s][0] = "packed"
			}
		}
		byShard[s] = append(byShard[s], m)
	}
	var found []Entry
	q := newBatch(ctx)
	for s, args := range byShard {
		q.add(luascript.Call{Script: lookupManyScript, Keys: []string{b.shards[s], b.ties[s]}, Args: args}, func(cmd *redis.Cmd) error {
			flat, err := cmd.StringSlice()
			if err != nil || len(flat) != 2*(len(args)-1) {
				return fmt.Errorf("lookup reply %v: %v", cmd.Val(), err)
			}
			for j := 0; j < len(flat); j += 2 {
				if flat[j] == "" {
					continue // not on the board
				}
				f, err := strconv.ParseFloat(flat[j+1], 64)
				e, ok := b.decode(flat[j], f)
				if err != nil || !ok {
					return fmt.Errorf("unexpected entry %q %q", flat[j], flat[j+1])
				}
				found = append(found, e)
			}
			return nil
		})
	}
	if err := q.run(b.c); err != nil {
		return nil, fmt.Errorf("rank: find members in %s: %w", b.cfg.Name, err)
	}
	return found, nil
}

// RankAcross returns member's entry on each of boards, in their order, as
// each board's Rank gives it; where member is not on a board, its entry is
// the zero Entry (Rank 0, which no ranked entry has). The boards are read
// concurrently, each at Rank's cost. Each board counts the call as one
// rank_across, refused not_found where member is absent.
func RankAcross(ctx context.Context, member string, boards ...*Board) ([]Entry, error) {
	if err := checkAcross(boards); err != nil {
		return nil, err
	}
	if err := validMember(member); err != nil {
		return nil, refuseAll(ctx, boards, func(in *instruments) *obs.Op { return in.rankAcross }, err)
	}
	out := make([]Entry, len(boards))
	var g errgroup.Group
	for i, b := range boards {
		g.Go(func() error {
			ctx, call := b.obs.rankAcross.Start(ctx)
			e, err := b.standing(ctx, member)
			if errors.Is(err, ErrNotFound) { // absent here: a zero Entry, an answer
				err = nil
			}
			out[i] = e
			return call.End(err)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// ApplyAcross applies u to each of boards, in turn, and returns the
// member's score on each: ApplyOnce(ctx, requestID, []Update{u}) on every
// board, one round trip each. A call that failed part of the way through
// the list, retried with the same requestID within ReplayWindow, applies
// nothing twice: the boards it reached return their first answers, the
// others apply now (a board listed twice applies once). Bad input (the
// request id, the member, the mode, a score a board cannot hold) fails
// before any board is written. A board that refuses the update because the
// sum would leave its range keeps the member's score; the others still
// apply, and the error is a *RejectedError whose Updates are the positions
// of the refusing boards.
func ApplyAcross(ctx context.Context, requestID string, u Update, boards ...*Board) ([]int64, error) {
	if err := checkAcross(boards); err != nil {
		return nil, err
	}
	op := func(in *instruments) *obs.Op { return in.applyAcross }
	if requestID == "" || len(requestID) > 64 {
		err := fmt.Errorf("%w: request id must be 1..64 bytes, got %d", ErrInvalid, len(requestID))
		return nil, refuseAll(ctx, boards, op, err)
	}
	for _, b := range boards {
		if _, err := b.ready(ctx); err != nil {
			return nil, refuseAll(ctx, boards, op, err)
		}
		if err := b.validate(u); err != nil {
			return nil, refuseAll(ctx, boards, op, err)
		}
	}
	scores := make([]int64, len(boards))
	var rejected []int
	for i, b := range boards {
		s, err := b.applyAcross(ctx, requestID, u)
		var r *RejectedError
		switch {
		case errors.As(err, &r):
			rejected = append(rejected, i)
		case err != nil:
			return nil, fmt.Errorf("rank: apply across, board %d (%s): %w", i, b.cfg.Name, err)
		}
		scores[i] = s
	}
	if len(rejected) > 0 {
		return scores, &RejectedError{Updates: rejected, Of: len(boards)}
	}
	return scores, nil
}

func (b *Board) applyAcross(ctx context.Context, requestID string, u Update) (_ int64, err error) {
	ctx, call := b.obs.applyAcross.Start(ctx)
	defer func() { err = call.End(err) }()
	scores, err := b.apply(ctx, requestID, true, []Update{u})
	if len(scores) != 1 {
		return 0, err
	}
	return scores[0], err
}

func checkAcross(boards []*Board) error {
	if slices.Contains(boards, nil) {
		return fmt.Errorf("%w: a nil board", ErrInvalid)
	}
	return nil
}

// refuseAll counts err as one refused call of op on every board.
func refuseAll(ctx context.Context, boards []*Board, op func(*instruments) *obs.Op, err error) error {
	for _, b := range boards {
		_, call := op(b.obs).Start(ctx)
		call.End(err)
	}
	return err
}
