package hotlist

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// nativeMin is the smallest batch (item entries) flushed by nativeFlush:
// below it the script's single round trip costs less than the three of a
// WATCH transaction.
const nativeMin = 128

// maxRefusals is how many transactions in a row Redis may refuse with an
// error reply (a proxy without WATCH or MULTI, an ACL without them) before
// the claim stops trying them: every flush would otherwise pay a refused
// transaction before the script. A new claim tries again.
const maxRefusals = 3

// refused reports whether err is an error reply of Redis (not a network
// error, nor errNativeStale).
func refused(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// nativeUsable reports whether b may be flushed by nativeFlush: a Decay
// batch of offsets, without likes (their dedup needs the script), large
// enough, no build under way and scaled to the landmark of the partition's
// set as the claim last saw it — or the partition never flushed.
func (c *Claim) nativeUsable(b *batch) bool {
	return c.l.cfg.Model == Decay && !c.a.sendAll && !c.rescaling && b.from >= 0 && len(b.likes) == 0 &&
		b.entries >= nativeMin && c.refusals < maxRefusals && (c.epoch == b.base || c.epoch < 0 && c.applied < 0)
}

// errNativeStale: Redis is not as the claim's copy says (another writer, a
// landmark passed, a build, a lost reply); nothing was done, and the
// script decides.
var errNativeStale = errors.New("hotlist: the heat set is not as the copy says")

// nativeFlush does what flush.lua does for a batch made from the claim's
// copy of the heat set — write the new scores, trim to Keep, store the
// offset, report the set's size, lowest score and the members trimmed —
// with Redis' own commands in a MULTI under WATCH instead of a script: in
// a script each ZADD pair costs Redis 1.5–2 times what it costs ZADD
// itself (doc.go). The fence is the script's: under WATCH of the meta hash
// and the heat set, the stored offset must be the claim's, the epoch b's
// landmark and no build under way, or errNativeStale; a write to either key
// before EXEC aborts the transaction, which is errNativeStale too. A claim
// without a copy reads the whole set in the same round trip and makes one
// (a new claim's first flush, or the first after a doubt), and a partition
// never flushed (no offset, no epoch, no set) is started at b's landmark,
// as the script would. go-redis never resends a transaction on another
// connection (its WATCH would be gone): any other error leaves the outcome
// unknown, and the caller at once sends the batch to the script, whose
// fence resolves it.
func (c *Claim) nativeFlush(ctx context.Context, b *batch) (flushReply, int, error) {
	pk, keep := c.l.parts[c.p], c.l.cfg.Keep
	heat := pk.heat[floorMod(b.base, 2)]
	load := !c.view.known
	var reply flushReply
	var sent int
	err := c.l.c.Watch(ctx, func(tx *redis.Tx) error {
		var state *redis.SliceCmd
		var members *redis.ZSliceCmd
		var card *redis.IntCmd
		_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			state = p.HMGet(ctx, pk.meta, "offset", "epoch", "mig")
			if load {
				members = p.ZRangeWithScores(ctx, heat, 0, -1)
			} else {
				card = p.ZCard(ctx, heat)
			}
			return nil
		})
		if err != nil {
			return err
		}
		meta := state.Val()
		stored, err1 := metaInt(meta[0], -1)
		epoch, err2 := metaInt(meta[1], -1)
		start := epoch < 0 && stored < 0 // a partition never flushed
		if err1 != nil || err2 != nil || stored != c.applied || meta[2] != nil || epoch != b.base && !start {
			return errNativeStale
		}
		if load {
			c.view.loadSorted(members.Val(), b.base, keep)
		}
		if start && len(c.view.scores) > 0 || !load && card.Val() != int64(len(c.view.scores)) {
			return errNativeStale
		}
		args, newcomers := c.nativeArgs(b, heat)
		sent = (len(args) - 2) / 2
		over := int64(len(c.view.scores) + newcomers - keep)
		var trimmed *redis.StringSliceCmd
		var size *redis.IntCmd
		var lowest *redis.ZSliceCmd
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if sent > 0 {
				p.Do(ctx, args...)
			}
			if over > 0 {
				// The coolest go, lowest score then lowest name, as the
				// script trims.
				trimmed = p.ZRange(ctx, heat, 0, over-1)
				p.ZRemRangeByRank(ctx, heat, 0, over-1)
			}
			if start {
				p.HSet(ctx, pk.meta, "offset", b.to, "epoch", b.base)
			} else {
				p.HSet(ctx, pk.meta, "offset", b.to)
			}
			size = p.ZCard(ctx, heat)
			lowest = p.ZRangeWithScores(ctx, heat, 0, 0)
			return nil
		})
		if errors.Is(err, redis.TxFailedErr) {
			return errNativeStale
		}
		if err != nil {
			return err
		}
		reply = flushReply{status: 1, stored: b.to, epoch: b.base, decay: true, card: size.Val()}
		if trimmed != nil {
			reply.names = trimmed.Val()
		}
		if z := lowest.Val(); reply.card >= int64(keep) && len(z) == 1 {
			reply.floor = strconv.FormatFloat(z[0].Score, 'g', -1, 64)
		}
		return nil
	}, pk.meta, heat)
	return reply, b.entries - sent, err
}

// nativeArgs is the ZADD of b's admitted items with their new scores, as
// the copy decides them, and how many of them the set does not hold yet.
func (c *Claim) nativeArgs(b *batch, heat string) ([]any, int) {
	full := c.view.full(c.l.cfg.Keep)
	args := make([]any, 2, 2+2*b.entries)
	args[0], args[1] = "ZADD", heat
	newcomers := 0
	for _, g := range b.groups {
		for i, item := range g.items {
			s, ok, fresh := c.view.score(item, g.vals[i], full)
			if !ok {
				continue
			}
			if fresh {
				newcomers++
			}
			args = append(args, formatFloat(s), item)
		}
	}
	return args, newcomers
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
