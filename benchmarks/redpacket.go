package main

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/redpacket"
)

// redpacketOpen measures opens (one atomic script per open, four callers)
// over 200 packets of 500 shares; once they are used up, opens take the
// "empty" path of the same script.
func redpacketOpen() Measurement {
	return onRedis("redpacket.grab", "opens (one call each)", 4, func(ctx context.Context, env *Env, r *devstack.Redis, ns string) (func() error, error) {
		sqlb, err := env.SQL(ctx)
		if err != nil {
			return nil, err
		}
		svc, err := redpacket.New(r.Client, []*sqlx.DB{sqlb.DB}, redpacket.Config{Namespace: ns, TablesPerDB: 1, MaxTotal: 1 << 40})
		if err != nil {
			return nil, err
		}
		if err := svc.Migrate(ctx); err != nil {
			return nil, err
		}
		ids := make([]int64, 200)
		for i := range ids {
			sender := ns + "-s" + strconv.Itoa(i)
			if err := svc.Deposit(ctx, sender, 1<<30); err != nil {
				return nil, err
			}
			p, err := svc.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: "bench", Total: 1 << 30, Count: 500})
			if err != nil {
				return nil, err
			}
			ids[i] = p.ID
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
