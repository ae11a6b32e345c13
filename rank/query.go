package rank

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// band is the stored values of score: the score itself (negated on an
// Ascending board), or a packed board's 2^TimeBits values of that score.
func (b *Board) band(score int64) (lo, hi int64) {
	if b.isPacked() {
		lo = score * int64(b.packed.span)
		return lo, lo + int64(b.packed.span) - 1
	}
	return b.sign * score, b.sign * score
}

func (b *Board) checkScore(score int64) error {
	if score < b.MinScore() || score > b.MaxScore() {
		return fmt.Errorf("%w: %d (%d..%d)", ErrScoreRange, score, b.MinScore(), b.MaxScore())
	}
	return nil
}

// RankOfScore is the rank a member with score would have, numbered as
// Config.Ties says: 1 + the members with a better score (Dense: 1 + the
// distinct better scores), so in Ordinal mode the rank of the first member
// to have reached score. One ZCOUNT per shard, pipelined; Dense costs what
// Rank's does.
func (b *Board) RankOfScore(ctx context.Context, score int64) (_ int64, err error) {
	ctx, call := b.obs.rankOfScore.Start(ctx)
	defer func() { err = call.End(err) }()
	var n int64
	err = b.settled(ctx, func(Encoding) (err error) {
		if err := b.checkScore(score); err != nil {
			return err
		}
		_, hi := b.band(score)
		if b.cfg.Ties == Dense {
			n, err = b.distinctAbove(ctx, hi)
		} else {
			n, err = b.countAbove(ctx, hi)
		}
		return err
	})
	return 1 + n, err
}

// CountInRange is the number of members whose score is in [min, max]: one
// ZCOUNT per shard, pipelined.
func (b *Board) CountInRange(ctx context.Context, min, max int64) (_ int64, err error) {
	ctx, call := b.obs.countInRange.Start(ctx)
	defer func() { err = call.End(err) }()
	var n int64
	err = b.settled(ctx, func(Encoding) error {
		lo, hi, err := b.storedRange(min, max, "count in")
		if err != nil {
			return err
		}
		n, err = b.countRange(ctx, strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10))
		return err
	})
	return n, err
}

// storedRange is the stored values of the scores in [min, max], lo ≤ hi,
// once the board's encoding is known; what names the operation in errors.
func (b *Board) storedRange(min, max int64, what string) (lo, hi int64, err error) {
	if err := b.checkScore(min); err != nil {
		return 0, 0, err
	}
	if err := b.checkScore(max); err != nil {
		return 0, 0, err
	}
	if min > max {
		return 0, 0, fmt.Errorf("%w: %s [%d, %d]: min above max", ErrInvalid, what, min, max)
	}
	lo, _ = b.band(min)
	_, hi = b.band(max)
	if lo > hi {
		lo, hi = hi, lo
	}
	return lo, hi, nil
}

// Percentile is the share of the board's members, in percent, whose score
// is worse than member's: the leader of ten members with distinct scores is
// at 90, the last at 0, and so is everyone on a board where all share one
// score. One lookup, then a ZCOUNT and a ZCARD per shard, pipelined.
func (b *Board) Percentile(ctx context.Context, member string) (_ float64, err error) {
	ctx, call := b.obs.percentile.Start(ctx)
	defer func() { err = call.End(err) }()
	var p float64
	err = b.settled(ctx, func(Encoding) (err error) {
		p, err = b.percentile(ctx, member)
		return err
	})
	return p, err
}

// percentile is Percentile's work, in the encoding read last.
func (b *Board) percentile(ctx context.Context, member string) (float64, error) {
	h, err := b.home(ctx, member)
	if err != nil {
		return 0, err
	}
	lo, _ := b.band(h.e.Score)
	pipe := b.c.Pipeline()
	worse := make([]*redis.IntCmd, len(b.shards))
	size := make([]*redis.IntCmd, len(b.shards))
	for i, key := range b.shards {
		worse[i] = pipe.ZCount(ctx, key, "-inf", "("+strconv.FormatInt(lo, 10))
		size[i] = pipe.ZCard(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("rank: percentile in %s: %w", b.cfg.Name, err)
	}
	var w, n int64
	for i := range worse {
		w += worse[i].Val()
		n += size[i].Val()
	}
	return 100 * float64(w) / float64(max(n, 1)), nil
}
