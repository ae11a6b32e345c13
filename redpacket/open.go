package redpacket

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
)

var (
	//go:embed open.lua
	openLua    string
	openScript = redis.NewScript(openLua)
)

// OpenRequest is one user opening one packet.
type OpenRequest struct {
	Packet int64
	User   string
}

// OpenResult is what an open got: a share in fen, or why not.
type OpenResult struct {
	Amount int64
	Err    error
}

// Grab is the cheap first step: it tells whether user could get a share
// of packet now — not expired, not empty, not claimed by them, meant for
// them — with one pipelined read and no write, so the crowd is shed before
// Open. A share is only ever assigned by Open.
func (s *Service) Grab(ctx context.Context, packet int64, user string) error {
	if err := validUser(user); err != nil {
		return err
	}
	state, list := s.packetKeys(packet)
	pipe := s.rdb.Pipeline()
	st := pipe.HMGet(ctx, state, "expires", "recipient", "u:"+user)
	left := pipe.LLen(ctx, list)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redpacket: grab: %w", err)
	}
	v := st.Val()
	expires, _ := v[0].(string)
	recipient, _ := v[1].(string)
	exp, err := strconv.ParseInt(expires, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %d", ErrNotFound, packet)
	case s.now() >= exp:
		return ErrExpired
	case v[2] != nil:
		return ErrAlreadyClaimed
	case recipient != "" && recipient != user:
		return ErrNotRecipient
	case left.Val() == 0:
		return ErrEmpty
	}
	return nil
}

// Open assigns user one share of packet — or returns the share they hold —
// in one atomic script that also records the claim and its outbox message.
func (s *Service) Open(ctx context.Context, packet int64, user string) (int64, error) {
	r := s.OpenMany(ctx, []OpenRequest{{packet, user}})[0]
	return r.Amount, r.Err
}

// OpensPerCall bounds the opens one script call decides, so one call never
// holds a Redis shard for long.
const OpensPerCall = 128

// Bucket is the bucket of packet's keys, 0 ≤ Bucket < Config.Buckets. A
// caller coalescing opens for OpenMany fills its script calls by grouping
// them by bucket, OpensPerCall at a time.
func (s *Service) Bucket(packet int64) int { return int(uint64(packet) % uint64(s.cfg.Buckets)) }

// OpenMany opens many packets at once: the opens of one bucket go in one
// script call (up to OpensPerCall), and every call is sent in one
// pipeline, so a batch costs one round trip. Results are in the order of
// reqs.
func (s *Service) OpenMany(ctx context.Context, reqs []OpenRequest) []OpenResult {
	res := make([]OpenResult, len(reqs))
	type call struct {
		keys []string
		args []any
		pos  []int
	}
	var calls []*call
	open := map[string]*call{}
	now := s.now()
	for i, r := range reqs {
		if err := validUser(r.User); err != nil {
			res[i].Err = err
			continue
		}
		if r.Packet <= 0 {
			res[i].Err = fmt.Errorf("%w: packet %d", ErrInvalid, r.Packet)
			continue
		}
		tag := s.bucketTag(r.Packet)
		c := open[tag]
		if c == nil || len(c.pos) == OpensPerCall {
			c = &call{keys: []string{s.outboxOf(r.Packet)}, args: []any{now}}
			open[tag] = c
			calls = append(calls, c)
		}
		state, list := s.packetKeys(r.Packet)
		c.keys = append(c.keys, state, list)
		c.args = append(c.args, r.User, r.Packet)
		c.pos = append(c.pos, i)
	}
	if len(calls) == 0 {
		return res
	}
	lcalls := make([]luascript.Call, len(calls))
	for i, c := range calls {
		lcalls[i] = luascript.Call{Script: openScript, Keys: c.keys, Args: c.args}
	}
	cmds, _ := luascript.RunAll(ctx, s.rdb, lcalls) // errors are read per call
	for i, c := range calls {
		vals, err := cmds[i].Int64Slice()
		if err == nil && len(vals) != len(c.pos) {
			err = fmt.Errorf("unexpected reply %v", cmds[i].Val())
		}
		for j, p := range c.pos {
			if err != nil {
				res[p].Err = fmt.Errorf("redpacket: open: %w", err)
				continue
			}
			res[p].Amount, res[p].Err = outcome(vals[j], reqs[p].Packet)
		}
	}
	return res
}

func outcome(v, packet int64) (int64, error) {
	switch {
	case v > 0:
		return v, nil
	case v == -1:
		return 0, ErrExpired
	case v == -2:
		return 0, ErrEmpty
	case v == -3:
		return 0, ErrNotRecipient
	}
	return 0, fmt.Errorf("%w: %d", ErrNotFound, packet)
}
