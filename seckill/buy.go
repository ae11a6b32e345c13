package seckill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-redis/redis_rate/v10"
)

var userPattern = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)

// request is one buyer's ask.
type request struct {
	user string
	qty  int64
}

// decision is the home bucket's answer to a batch of requests: one letter per
// request (see buy.lua) and the batch's number, which the ids of its
// reservations carry.
type decision struct {
	answers string
	batch   int64
}

// admit checks a purchase before it reaches the stock: input, the
// campaign's window (on the caller's clock) and the entrance rate limits.
func (sl *Sale) admit(ctx context.Context, user string, qty int64) error {
	s, c := sl.s, sl.c
	if !userPattern.MatchString(user) || qty < 1 || qty > c.Limit {
		return fmt.Errorf("%w: user %q (1..128 of A-Z a-z 0-9 _ . : @ -), qty %d (1..%d)", ErrInvalid, user, qty, c.Limit)
	}
	now := s.cfg.Now()
	if now.Before(c.Starts) {
		return ErrNotStarted
	}
	if !now.Before(c.Ends) {
		return ErrEnded
	}
	if sl.SoldOut() {
		return ErrSoldOut // the crowd after the last unit costs no Redis call
	}
	if !s.cfg.UserLimit.IsZero() {
		if err := s.allow(ctx, s.space.Key(c.ID, "rate", "user", user), s.cfg.UserLimit); err != nil {
			return err
		}
	}
	if !s.cfg.GlobalLimit.IsZero() {
		if err := s.allow(ctx, s.space.Key(c.ID, "rate", "all"), s.cfg.GlobalLimit); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) allow(ctx context.Context, key string, limit redis_rate.Limit) error {
	res, err := s.limiter.Allow(ctx, key, limit)
	if err != nil {
		return fmt.Errorf("seckill: rate limit: %w", err)
	}
	if res.Allowed == 0 {
		return ErrRateLimited
	}
	return nil
}

// home is the bucket holding user's quota, and the first it buys from.
func (sl *Sale) home(user string) int { return int(xxhash.Sum64String(user) % uint64(sl.c.Buckets)) }

// Buy reserves qty units for user and returns the reservation id. The
// reservation's order (OrderOf) must be paid within PayTimeout or it is released.
func (sl *Sale) Buy(ctx context.Context, user string, qty int64) (string, error) {
	ctx, call := sl.s.obs.buy.Start(ctx)
	id, err := sl.buy(ctx, user, qty)
	return id, call.End(err)
}

func (sl *Sale) buy(ctx context.Context, user string, qty int64) (string, error) {
	if err := sl.admit(ctx, user, qty); err != nil {
		return "", err
	}
	r := request{user: user, qty: qty}
	h := sl.home(user)
	d, err := sl.decide(ctx, h, []request{r})
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return "", err
	}
	id, err := sl.finish(ctx, r, h, d, 0, err)
	return id, sl.noteSoldOut(r.qty, err)
}

// SoldOut reports whether this process was told the campaign is sold out
// within the last Config.SoldOutFor: Buy then answers ErrSoldOut at once,
// without rate limits or Redis — the local flag that lets the gate stop the
// crowd after the last unit. A unit that comes back (a release) is sold
// again once the flag lapses.
func (sl *Sale) SoldOut() bool { return sl.s.cfg.Now().UnixNano() < sl.soldOut.Load() }

// noteSoldOut raises the local flag when a buyer of one unit found every
// bucket empty (a buyer of several may find none of them with enough).
func (sl *Sale) noteSoldOut(qty int64, err error) error {
	if qty == 1 && errors.Is(err, ErrSoldOut) && sl.s.cfg.SoldOutFor > 0 {
		sl.soldOut.Store(sl.s.cfg.Now().Add(sl.s.cfg.SoldOutFor).UnixNano())
	}
	return err
}

// batchNumber numbers a batch (a call of buy.lua or take.lua).
func (sl *Sale) batchNumber(ctx context.Context) (int64, error) {
	n, err := sl.s.cfg.IDs.Next(ctx)
	if err != nil {
		return 0, fmt.Errorf("seckill: batch number: %w", err)
	}
	return n, nil
}

// decide runs the home-bucket script for a batch of requests, numbered once
// here, and returns one answer letter per request (see buy.lua), with
// ErrNotReplicated when the answers are valid but not confirmed by replicas.
// While Reconcile rebuilds the bucket the script answers W: decide waits and
// asks again, for up to maxFenceWait, then answers X.
func (sl *Sale) decide(ctx context.Context, bucket int, reqs []request) (decision, error) {
	n, err := sl.batchNumber(ctx)
	if err != nil {
		return decision{}, err
	}
	wait := time.Millisecond
	for waited := time.Duration(0); ; waited += wait {
		out, err := sl.decideOnce(ctx, bucket, n, reqs)
		if out == "" || out[0] != 'W' {
			return decision{answers: out, batch: n}, err
		}
		if waited >= maxFenceWait {
			return decision{answers: strings.Repeat("X", len(reqs)), batch: n}, nil
		}
		select {
		case <-ctx.Done():
			return decision{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func (sl *Sale) decideOnce(ctx context.Context, bucket int, n int64, reqs []request) (string, error) {
	keys, args := sl.buyCall(bucket, n, reqs)
	cmd, err := sl.s.runDecision(ctx, buyScript, keys, args...)
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return "", fmt.Errorf("seckill: buy on %s/%d: %w", sl.c.ID, bucket, err)
	}
	if out, _ := cmd.Text(); len(out) == len(reqs) {
		return out, err
	}
	return "", fmt.Errorf("seckill: buy on %s/%d: %q answers %d buyers", sl.c.ID, bucket, cmd.Val(), len(reqs))
}

// buyCall is the keys and arguments of buy.lua for batch n of reqs on
// bucket b.
func (sl *Sale) buyCall(b int, n int64, reqs []request) ([]string, []any) {
	only := 0
	if sl.c.Buckets == 1 {
		only = 1
	}
	deadline := sl.s.deadline()
	rec, msg := sl.allReserved(b, n, deadline, reqs)
	args := make([]any, 0, 9+2*len(reqs))
	args = append(args, sl.c.Limit, deadline, sl.c.ID, b, only, sl.recentTTL(), n, rec, msg)
	for _, r := range reqs {
		args = append(args, r.user, r.qty)
	}
	keys := sl.bucketKeys(b, "stock", "quota", "res", "due", "outbox")
	keys = append(keys, sl.recent(b), sl.key(b, "version"), sl.key(b, "fence"))
	return keys, args
}

// allReserved returns the record (see parseRecord) and the order message
// (see OrderMessage) that batch n of reqs on bucket b gets if every buyer in
// it is reserved. buy.lua writes them as they are in that case, the usual
// one under load, and otherwise cuts its reservations' slices out of them:
// it builds no string per buyer.
func (sl *Sale) allReserved(b int, n int64, deadline int64, reqs []request) (rec, msg []byte) {
	id := sl.id(b, n, 0)
	size := 0
	for _, r := range reqs {
		size += len(r.user)
	}
	rec = make([]byte, 0, 4+size+12*len(reqs))
	msg = make([]byte, 0, 40+len(sl.c.ID)+size+(len(id)+56)*len(reqs))
	rec = strconv.AppendInt(rec, int64(b), 10)
	msg = append(msg, `{"v":1,"campaign":"`...)
	msg = append(msg, sl.c.ID...)
	msg = append(msg, `","orders":[`...)
	for i, r := range reqs {
		rec = append(rec, ';')
		rec = strconv.AppendInt(rec, int64(i), 10)
		rec = append(rec, '=')
		rec = append(rec, r.user...)
		rec = append(rec, ',')
		rec = strconv.AppendInt(rec, r.qty, 10)
		if i > 0 {
			msg = append(msg, ',')
		}
		msg = append(msg, `{"id":"`...)
		msg = append(msg, id...)
		if i > 0 {
			msg = append(msg, '.')
			msg = strconv.AppendInt(msg, int64(i), 10)
		}
		msg = append(msg, `","user":"`...)
		msg = append(msg, r.user...)
		msg = append(msg, `","qty":`...)
		msg = strconv.AppendInt(msg, r.qty, 10)
		msg = append(msg, `,"pay_by":`...)
		msg = strconv.AppendInt(msg, deadline, 10)
		msg = append(msg, '}')
	}
	return rec, append(msg, "]}"...)
}

func (s *Service) deadline() int64 { return s.cfg.Now().Add(s.cfg.PayTimeout).UnixMilli() }

// finish turns the home bucket's answer to the request in slot of batch d
// into the buyer's: a reservation, the limit, or — the home bucket being
// empty — stock from another bucket, else the held quota back and sold out.
// unconfirmed is the home decision's ErrNotReplicated, if any, returned with
// a reservation made there.
func (sl *Sale) finish(ctx context.Context, r request, h int, d decision, slot int, unconfirmed error) (string, error) {
	c := sl.c
	answer := d.answers[slot]
	held := sl.id(h, d.batch, slot)
	switch answer {
	case 'R':
		return held, unconfirmed
	case 'L':
		return "", ErrLimitReached
	case 'S':
		return "", ErrSoldOut
	case 'X':
		return "", ErrStateLost
	case 'H':
		// One pipelined read says which buckets may still serve, so a
		// sold-out buyer costs one round trip, not one per bucket; the
		// take script is what decides.
		stocks, err := sl.bucketStocks(ctx)
		if err != nil {
			return "", err // the hold stays: no oversell
		}
		lost := false
		var n int64 // the take's own batch: one number serves every bucket tried
		for i := 1; i < c.Buckets; i++ {
			b := (h + i) % c.Buckets
			lost = lost || stocks[b] == stockLost
			if stocks[b] < r.qty {
				continue
			}
			if n == 0 {
				if n, err = sl.batchNumber(ctx); err != nil {
					return "", err // the hold stays: no oversell
				}
			}
			keys := sl.bucketKeys(b, "stock", "res", "due", "outbox", "version", "fence")
			id := sl.id(b, n, 0)
			cmd, err := sl.s.runDecision(ctx, takeScript, keys, c.ID, n, r.user, r.qty, h, sl.s.deadline(), b)
			if err != nil && !errors.Is(err, ErrNotReplicated) {
				return "", fmt.Errorf("seckill: take from %s/%d: %w", c.ID, b, err) // the hold stays: no oversell
			}
			took, _ := cmd.Int64()
			if took == 1 {
				return id, err
			}
			lost = lost || took < 0
		}
		if err := sl.unquota(ctx, r.user, r.qty, h, "hold:"+held); err != nil {
			return "", err
		}
		if lost { // a bucket lost or being rebuilt may hold units: not sold out
			return "", ErrStateLost
		}
		return "", ErrSoldOut
	}
	return "", fmt.Errorf("seckill: buy on %s/%d: unknown answer %q", c.ID, h, answer)
}

// unquota gives user's quota back on its home bucket h, once per token.
func (sl *Sale) unquota(ctx context.Context, user string, qty int64, h int, token string) error {
	keys := []string{sl.key(h, "quota"), sl.recent(h), sl.key(h, "version")}
	if err := unquotaScript.Run(ctx, sl.s.rdb, keys, user, qty, token, sl.recentTTL()).Err(); err != nil {
		return fmt.Errorf("seckill: return quota of %s: %w", user, err)
	}
	return nil
}

// callID names one script call, so that the same call sent again (same
// arguments) is recognised by the script.
func callID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Batcher folds concurrent buyers of one campaign into one script call per
// home bucket: each bucket has a loop that, once a request arrives, gathers
// more for up to Linger or until MaxBatch and decides them all in one round
// trip. Every caller still gets its own answer, and a user twice in one batch
// is decided in order.
type Batcher struct {
	sl      *Sale
	queues  []chan *waiting
	cfg     BatchConfig
	stop    chan struct{}
	drained chan struct{} // closed once Close answered everyone queued
	wg      sync.WaitGroup
	closed  sync.Once
}

// ErrBatcherClosed is returned by a Batcher's Buy after Close.
var ErrBatcherClosed = errors.New("seckill: batcher closed")

// BatchConfig sizes a Batcher.
type BatchConfig struct {
	// MaxBatch is the most buyers decided in one call [256]. Larger
	// batches hold the Redis shard longer per call.
	MaxBatch int
	// Linger is how long a batch waits for more buyers after its first
	// [200µs]: the latency a lone buyer pays for everyone's throughput.
	Linger time.Duration
}

type waiting struct {
	request
	d    decision
	slot int
	err  error
	done chan struct{}
}

// NewBatcher starts a batcher for the campaign. Close it to stop its loops.
func (sl *Sale) NewBatcher(cfg BatchConfig) *Batcher {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	if cfg.Linger == 0 {
		cfg.Linger = 200 * time.Microsecond
	}
	b := &Batcher{sl: sl, cfg: cfg, stop: make(chan struct{}), drained: make(chan struct{})}
	for bucket := range sl.c.Buckets {
		q := make(chan *waiting, 4*cfg.MaxBatch)
		b.queues = append(b.queues, q)
		b.wg.Go(func() { b.loop(bucket, q) })
	}
	return b
}

// Buy is Sale.Buy through the batcher.
func (b *Batcher) Buy(ctx context.Context, user string, qty int64) (string, error) {
	ctx, call := b.sl.s.obs.buyBatched.Start(ctx)
	id, err := b.buy(ctx, user, qty)
	return id, call.End(err)
}

func (b *Batcher) buy(ctx context.Context, user string, qty int64) (string, error) {
	select {
	case <-b.stop:
		return "", ErrBatcherClosed
	default:
	}
	if err := b.sl.admit(ctx, user, qty); err != nil {
		return "", err
	}
	h := b.sl.home(user)
	w := &waiting{request: request{user: user, qty: qty}, done: make(chan struct{})}
	select {
	case b.queues[h] <- w:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-b.stop:
		return "", ErrBatcherClosed
	}
	select {
	case <-w.done: // decided even if ctx ends meanwhile: the answer must not be lost
	case <-b.drained:
		// Queued as Close stopped the loops (select picks either of two
		// ready cases), after its drain: nothing will decide w.
		select {
		case <-w.done:
		default:
			return "", ErrBatcherClosed
		}
	}
	if w.err != nil && !errors.Is(w.err, ErrNotReplicated) {
		return "", w.err
	}
	id, err := b.sl.finish(ctx, w.request, h, w.d, w.slot, w.err)
	return id, b.sl.noteSoldOut(qty, err)
}

func (b *Batcher) loop(bucket int, q chan *waiting) {
	batch := make([]*waiting, 0, b.cfg.MaxBatch)
	reqs := make([]request, 0, b.cfg.MaxBatch)
	linger := time.NewTimer(time.Hour)
	for {
		select {
		case w := <-q:
			batch = append(batch[:0], w)
		case <-b.stop:
			return
		}
		linger.Reset(b.cfg.Linger)
	fill:
		for len(batch) < b.cfg.MaxBatch {
			select {
			case w := <-q:
				batch = append(batch, w)
			case <-linger.C:
				break fill
			}
		}
		linger.Stop()
		reqs = reqs[:0]
		for _, w := range batch {
			reqs = append(reqs, w.request)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := b.sl.decide(ctx, bucket, reqs)
		cancel()
		if err != nil {
			b.sl.s.log.Warn("seckill: batch decision failed; its buyers got the error", "campaign", b.sl.c.ID, "bucket", bucket,
				"buyers", len(reqs), "err", err)
		}
		if in := b.sl.s.obs; in.block.Metering() {
			in.batch.Record(ctx, int64(len(reqs)))
		}
		for i, w := range batch {
			w.d, w.slot, w.err = d, i, err
			close(w.done)
		}
	}
}

// Close stops the batcher's loops; requests still queued get an error. It
// is safe to call more than once (it closed a closed channel before) and
// always returns nil: a Batcher is an io.Closer.
func (b *Batcher) Close() error {
	b.closed.Do(func() {
		close(b.stop)
		b.wg.Wait()
		for _, q := range b.queues { // answer whoever is still queued
			for {
				select {
				case w := <-q:
					w.err = ErrBatcherClosed
					close(w.done)
					continue
				default:
				}
				break
			}
		}
		close(b.drained)
	})
	return nil
}
