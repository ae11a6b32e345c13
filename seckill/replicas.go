package seckill

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// runDecision runs a script whose answer a buyer is told. With
// Config.WaitReplicas it sends WAIT right behind the script on the same
// connection (WAIT waits for the connection's own writes), and returns the
// script's command with ErrNotReplicated when fewer replicas than asked
// acknowledged it within WaitTimeout.
func (s *Service) runDecision(ctx context.Context, sc *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	if s.cfg.WaitReplicas == 0 {
		cmd := sc.Run(ctx, s.rdb, keys, args...)
		return cmd, cmd.Err()
	}
	node, err := s.master(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	var cmd, acked *redis.Cmd
	for _, eval := range []func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd{sc.EvalSha, sc.Eval} {
		pipe := node.Pipeline()
		cmd = eval(ctx, pipe, keys, args...)
		acked = pipe.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
		pipe.Exec(ctx) // errors are read per command
		if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			break
		}
	}
	if err := cmd.Err(); err != nil {
		if cc, ok := s.rdb.(*redis.ClusterClient); ok && redirected(err) {
			cc.ReloadState(ctx) // the slot moved (a failover): the next call finds its master
		}
		return cmd, err
	}
	if n, err := acked.Int64(); err != nil || n < int64(s.cfg.WaitReplicas) {
		return cmd, fmt.Errorf("%w: %d of %d replicas within %v (%v)", ErrNotReplicated, n, s.cfg.WaitReplicas, s.cfg.WaitTimeout, err)
	}
	return cmd, nil
}

// master is the client of the master serving key: the client itself, or on
// a cluster the node owning key's slot.
func (s *Service) master(ctx context.Context, key string) (interface{ Pipeline() redis.Pipeliner }, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return s.rdb, nil
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("seckill: master of %s: %w", key, err)
	}
	return node, nil
}

func redirected(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "READONLY"))
}
