package shortlink

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// RateLimitError is the error of a call refused by a rate limit; it wraps
// ErrRateLimited.
type RateLimitError struct {
	Limit      string        // "create" or "miss"
	RetryAfter time.Duration // until the client has budget again
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%v: %s limit, retry after %v", ErrRateLimited, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// allow spends one unit of ip's budget for kind.
func (s *Service) allow(ctx context.Context, kind, ip string, limit redis_rate.Limit) error {
	res, err := s.limiter.Allow(ctx, s.rateKey(kind, ip), limit)
	if err != nil {
		return fmt.Errorf("shortlink: rate limit: %w", err)
	}
	if res.Allowed == 0 {
		return &RateLimitError{Limit: kind, RetryAfter: res.RetryAfter}
	}
	return nil
}

// limitMisses runs find, a lookup, under ip's miss budget (no limit for an
// empty ip): a client with no budget left is refused before find runs, so
// it learns nothing, and each ErrNotFound from find spends one unit. A
// limiter that fails (Redis down) is reported to OnError and lets the call
// through, so that cached links keep resolving.
func (s *Service) limitMisses(ctx context.Context, ip string, find func() error) error {
	if ip == "" {
		return find()
	}
	if s.misses.suspect(ip, s.cfg.Now()) {
		if err := s.missBudget(ctx, ip); err != nil {
			s.misses.missed(ip, s.cfg.Now())
			return err
		}
	}
	err := find()
	if errors.Is(err, ErrNotFound) {
		s.misses.missed(ip, s.cfg.Now())
		lerr := s.allow(ctx, "miss", ip, s.cfg.MissLimit)
		if errors.Is(lerr, ErrRateLimited) { // spent meanwhile by concurrent misses
			return lerr
		}
		if lerr != nil {
			s.cfg.OnError(lerr)
		}
	}
	return err
}

// missBudget refuses ip when it has no miss left, without spending any.
func (s *Service) missBudget(ctx context.Context, ip string) error {
	limit := s.cfg.MissLimit
	res, err := s.limiter.AllowN(ctx, s.rateKey("miss", ip), limit, 0)
	if err != nil {
		s.cfg.OnError(fmt.Errorf("shortlink: rate limit: %w", err))
		return nil
	}
	if res.Remaining >= 1 {
		return nil
	}
	// A peek reports no RetryAfter. GCRA: the budget is full after
	// ResetAfter and each unit takes Period/Rate to come back, so one unit
	// is back Burst-1 units before it is full.
	perUnit := limit.Period / time.Duration(limit.Rate)
	return &RateLimitError{Limit: "miss", RetryAfter: max(time.Millisecond, res.ResetAfter-time.Duration(limit.Burst-1)*perUnit)}
}

func (s *Service) rateKey(kind, ip string) string { return s.space.Key(clientKey(ip), "rate", kind) }

// clientKey is the identity a client is limited by: every spelling of one
// IPv4 address (IPv4-mapped IPv6 included) is one client, and so is an IPv6
// /64 — one subscriber's, in which it can pick a new address per request.
// Anything that is not an IP address (a user id, say) is used as it is.
func clientKey(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}
