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
	ctx, call := s.obs.grab.Start(ctx)
	return call.End(s.grab(ctx, packet, user))
}

func (s *Service) grab(ctx context.Context, packet int64, user string) error {
	if err := validUser(user); err != nil {
		return err
	}
	if err := validPacket(packet); err != nil {
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
	ctx, call := s.obs.open.Start(ctx)
	res := s.openMany(ctx, []OpenRequest{{packet, user}})
	s.obs.decided(ctx, res)
	return res[0].Amount, call.End(res[0].Err)
}

// OpensPerCall bounds the opens one script call decides (a user's repeated
// open of a packet in the batch counts once), so one call never holds a
// Redis shard for long.
const OpensPerCall = 128

// Bucket is the bucket of packet's keys, 0 ≤ Bucket < Config.Buckets. A
// caller coalescing opens for OpenMany fills its script calls by grouping
// them by bucket, OpensPerCall at a time.
func (s *Service) Bucket(packet int64) int { return int(uint64(packet) % uint64(s.cfg.Buckets)) }

// OpenMany opens many packets at once: the opens of one bucket go in one
// script call (up to OpensPerCall), grouped by packet, and every call is
// sent in one pipeline, so a batch costs one round trip. A user opening one
// packet twice in a batch is one open with both results. Results are in the
// order of reqs.
func (s *Service) OpenMany(ctx context.Context, reqs []OpenRequest) []OpenResult {
	ctx, call := s.obs.openMany.Start(ctx)
	res := s.openMany(ctx, reqs)
	call.End(s.obs.decided(ctx, res))
	return res
}

func (s *Service) openMany(ctx context.Context, reqs []OpenRequest) []OpenResult {
	res := make([]OpenResult, len(reqs))
	calls := s.openCalls(reqs, res)
	if len(calls) == 0 {
		return res
	}
	lcalls := make([]luascript.Call, len(calls))
	now := s.now()
	for i, c := range calls {
		lcalls[i] = c.script(s, now)
	}
	cmds, _ := luascript.RunAll(ctx, s.rdb, lcalls) // errors are read per call
	for i, c := range calls {
		vals, err := cmds[i].Int64Slice()
		if err == nil && len(vals) != c.opens {
			err = fmt.Errorf("unexpected reply %v", cmds[i].Val())
		}
		k := 0
		for _, g := range c.packets {
			for _, pos := range g.pos {
				for _, p := range pos {
					if err != nil {
						res[p].Err = fmt.Errorf("redpacket: open: %w", err)
					} else {
						res[p].Amount, res[p].Err = outcome(vals[k], g.packet)
					}
				}
				k++
			}
		}
	}
	return res
}

// openCall is one script call: one bucket's opens, grouped by packet.
type openCall struct {
	packets []*packetOpens
	of      map[int64]*packetOpens
	opens   int
}

// packetOpens are one packet's opens in a call: distinct users, and for
// each the positions of its requests.
type packetOpens struct {
	packet int64
	users  []string
	pos    [][]int
	of     map[string]int
}

// openCalls lays reqs out in script calls, at most OpensPerCall distinct
// opens each; an invalid request gets its error in res and no call.
func (s *Service) openCalls(reqs []OpenRequest, res []OpenResult) []*openCall {
	var calls []*openCall
	open := map[int]*openCall{} // by bucket: the call being filled
	for i, r := range reqs {
		if err := validUser(r.User); err != nil {
			res[i].Err = err
			continue
		}
		if err := validPacket(r.Packet); err != nil {
			res[i].Err = err
			continue
		}
		b := s.Bucket(r.Packet)
		c := open[b]
		g := c.packet(r.Packet)
		if g != nil {
			if u, ok := g.of[r.User]; ok { // the same open again: one answer
				g.pos[u] = append(g.pos[u], i)
				continue
			}
		}
		if c == nil || c.opens == OpensPerCall {
			c = &openCall{of: map[int64]*packetOpens{}}
			open[b] = c
			calls = append(calls, c)
			g = nil
		}
		if g == nil {
			g = &packetOpens{packet: r.Packet, of: map[string]int{}}
			c.of[r.Packet] = g
			c.packets = append(c.packets, g)
		}
		g.of[r.User] = len(g.users)
		g.users = append(g.users, r.User)
		g.pos = append(g.pos, []int{i})
		c.opens++
	}
	return calls
}

func (c *openCall) packet(id int64) *packetOpens {
	if c == nil {
		return nil
	}
	return c.of[id]
}

// script is the call to open.lua for c at now (Unix ms).
func (c *openCall) script(s *Service, now int64) luascript.Call {
	keys := make([]string, 0, 1+2*len(c.packets))
	args := make([]any, 0, 1+2*len(c.packets)+c.opens)
	keys = append(keys, s.outboxOf(c.packets[0].packet))
	args = append(args, now)
	for _, g := range c.packets {
		state, list := s.packetKeys(g.packet)
		keys = append(keys, state, list)
		args = append(args, g.packet, len(g.users))
		for _, u := range g.users {
			args = append(args, "u:"+u)
		}
	}
	return luascript.Call{Script: openScript, Keys: keys, Args: args}
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
