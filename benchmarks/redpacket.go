package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/redpacket"
)

// redpacketOpen measures opens (one atomic script per open, four callers)
// over 200 packets of 500 shares; once they are used up, opens take the
// "empty" path of the same script.
func redpacketOpen() Measurement {
	return onRedis("redpacket.grab", "opens (one call each)", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		svc, ids, err := benchPackets(ctx, env, r, ns, 200)
		if err != nil {
			return nil, err
		}
		var n atomic.Int64
		return func() error {
			i := n.Add(1)
			_, err := svc.Open(ctx, ids[i%int64(len(ids))], "u"+strconv.FormatInt(i, 36))
			if errors.Is(err, redpacket.ErrEmpty) {
				return nil
			}
			return err
		}, nil
	})
}

// The batched measurement's shape: each op is one OpenMany of
// batchedCalls full bucket calls (OpensPerCall opens each), four in flight,
// over batchedPackets packets of 500 shares — about a million opens, every
// one a new claim; a run that uses them all up fails rather than count the
// cheaper "empty" path.
const (
	batchedCalls   = 16
	batchedPackets = 2048
)

// redpacketOpenBatched measures opens coalesced across packets and
// pipelined, as BenchmarkOpenBatched does. It reads Redis' CPU time too, and
// the sizing uses that: the opens per second of one Redis main thread,
// where the opens per second of the run are bounded by the clients sharing
// the machine.
func redpacketOpenBatched() Measurement {
	m := onRedis("redpacket.grab.batched", fmt.Sprintf("opens (OpenMany: %d calls of %d, pipelined)", batchedCalls, redpacket.OpensPerCall), 4,
		func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
			svc, ids, err := benchPackets(ctx, env, r, ns, batchedPackets)
			if err != nil {
				return nil, err
			}
			batches := fullBatches(svc, ids)
			var next atomic.Int64
			return func() error {
				i := next.Add(1) - 1
				if i >= int64(len(batches)) {
					return fmt.Errorf("redpacket.grab.batched: all %d shares opened: run shorter", batchedPackets*500)
				}
				for _, res := range svc.OpenMany(ctx, batches[i]) {
					if res.Err != nil {
						return res.Err
					}
				}
				return nil
			}, nil
		})
	setup := m.Setup
	m.Setup = func(ctx context.Context, env *Env) (Prepared, error) {
		p, err := setup(ctx, env)
		p.Batch = batchedCalls * redpacket.OpensPerCall
		return p, err
	}
	return m
}

// fullBatches lays out every share of packets (500 each) as batches of
// batchedCalls bucket calls of OpensPerCall opens, each bucket's opens
// spread over its packets; only the last batch may be short.
func fullBatches(svc *redpacket.Service, packets []int64) [][]redpacket.OpenRequest {
	byBucket := map[int][]redpacket.OpenRequest{}
	var order []int
	for u := range 500 {
		for _, p := range packets {
			b := svc.Bucket(p)
			if byBucket[b] == nil {
				order = append(order, b)
			}
			byBucket[b] = append(byBucket[b], redpacket.OpenRequest{Packet: p, User: "u" + strconv.Itoa(u)})
		}
	}
	var out [][]redpacket.OpenRequest
	var batch []redpacket.OpenRequest
	calls := 0
	for left := len(packets) * 500; left > 0; {
		for _, b := range order {
			q := byBucket[b]
			k := min(redpacket.OpensPerCall, len(q))
			if k == 0 {
				continue
			}
			batch, byBucket[b], left, calls = append(batch, q[:k]...), q[k:], left-k, calls+1
			if calls == batchedCalls {
				out, batch, calls = append(out, batch), nil, 0
			}
		}
	}
	if batch != nil {
		out = append(out, batch)
	}
	return out
}

// benchPackets sends n packets of 500 shares on env's SQL, eight at a time.
func benchPackets(ctx context.Context, env *Env, r *devcore.Redis, ns string, n int) (*redpacket.Service, []int64, error) {
	sqlb, err := env.SQL(ctx)
	if err != nil {
		return nil, nil, err
	}
	svc, err := redpacket.New(r.Client, []*sqlx.DB{sqlb.DB}, redpacket.Config{Namespace: ns, TablesPerDB: 1, MaxTotal: 1 << 40})
	if err != nil {
		return nil, nil, err
	}
	env.Fixture("redpacket:"+ns, func() (any, func(), error) { return svc, func() { svc.Close() }, nil })
	if err := svc.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	ids := make([]int64, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range ids {
		g.Go(func() error {
			sender := ns + "-s" + strconv.Itoa(i)
			if err := svc.Deposit(gctx, sender, 1<<30); err != nil {
				return err
			}
			p, err := svc.Send(gctx, redpacket.SendRequest{Sender: sender, RequestID: "bench", Total: 1 << 30, Count: 500})
			ids[i] = p.ID
			return err
		})
	}
	return svc, ids, g.Wait()
}
