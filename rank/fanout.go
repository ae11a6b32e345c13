package rank

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A sharded read asks every shard the same plain commands in one pipeline,
// which go-redis sends to each cluster node in parallel. With 64 shards the
// cost is in those commands, so they are built with the shard keys boxed once
// (Board.keyArgs) and the bounds boxed once per read.

// batch is the commands of one pipelined round trip.
type batch struct {
	ctx  context.Context
	cmds []redis.Cmder
}

func newBatch(ctx context.Context) *batch { return &batch{ctx: ctx} }

func (q *batch) add(cmd redis.Cmder) { q.cmds = append(q.cmds, cmd) }

// run sends the queued commands; each command holds its own reply.
func (q *batch) run(c redis.UniversalClient) error {
	if len(q.cmds) == 0 {
		return nil
	}
	pipe := c.Pipeline()
	pipe.BatchProcess(q.ctx, q.cmds...)
	q.cmds = q.cmds[:0]
	_, err := pipe.Exec(q.ctx)
	return err
}

// position is a place on the board, between the entries ranked before e and
// those ranked after it, with e's value as command arguments.
type position struct {
	e      Entry
	at     any // "v": e's value, inclusive
	beyond any // "(v": e's value, exclusive
}

func newPosition(e Entry) position {
	v := strconv.FormatUint(e.value, 10)
	return position{e: e, at: v, beyond: "(" + v}
}

// standing counts, on every shard, the entries above a position's value
// and those at it — almost always none, or e itself. Members at one value
// rank by name, so a shard holding others at e's value is asked for their
// names: rarely, in one more round trip.
type standing struct {
	above []*redis.IntCmd // ZCOUNT (v +inf
	equal []*redis.IntCmd // ZCOUNT v v
}

func (q *batch) standing(b *Board, p position) standing {
	s := standing{above: make([]*redis.IntCmd, len(b.keyArgs)), equal: make([]*redis.IntCmd, len(b.keyArgs))}
	for i, key := range b.keyArgs {
		s.above[i] = redis.NewIntCmd(q.ctx, "zcount", key, p.beyond, "+inf")
		s.equal[i] = redis.NewIntCmd(q.ctx, "zcount", key, p.at, p.at)
		q.add(s.above[i])
		q.add(s.equal[i])
	}
	return s
}

// ahead is the number of entries ranked before p, once s has been read.
func (s standing) ahead(q *batch, b *Board, p position) (int64, error) {
	var n int64
	var tied []int
	home := b.shardOf(p.e.Member)
	for i, cmd := range s.above {
		n += cmd.Val()
		if eq := s.equal[i].Val(); eq > 1 || eq == 1 && i != home {
			tied = append(tied, i)
		}
	}
	if len(tied) == 0 {
		return n, nil
	}
	names := q.names(b, p, tied)
	if err := q.run(b.c); err != nil {
		return 0, err
	}
	for _, cmd := range names {
		for _, m := range cmd.Val() {
			if m > p.e.Member {
				n++
			}
		}
	}
	return n, nil
}

// names queues, on the given shards, ZRANGE of the members at p's value.
func (q *batch) names(b *Board, p position, shards []int) []*redis.StringSliceCmd {
	cmds := make([]*redis.StringSliceCmd, len(shards))
	for j, i := range shards {
		cmds[j] = redis.NewStringSliceCmd(q.ctx, "zrange", b.keyArgs[i], p.at, p.at, "byscore")
		q.add(cmds[j])
	}
	return cmds
}
