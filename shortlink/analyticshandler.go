package shortlink

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The API handler's route that reads a link's analytics.

type seriesResponse struct {
	Code   string    `json:"code"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Step   string    `json:"step"` // "1h" or "24h"
	Points []Point   `json:"points"`
}

type breakdownResponse struct {
	Code   string    `json:"code"`
	Dim    Dimension `json:"dim"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Values []Count   `json:"values"`
}

// statsQuery is the parameters of GET /api/links/{code}/stats.
type statsQuery struct {
	from, to time.Time
	step     time.Duration
	dim      Dimension // "": a series
	n        int
}

// DefaultBreakdown is the stats route's n when none is given.
const DefaultBreakdown = 10

// parseStatsQuery reads from and to (RFC 3339), step (1h or 24h [1h]), dim
// and n (with dim, 1..MaxBreakdown [10]), each at most once. Without to,
// the range ends now; without from, it starts 24 steps before to (30 days
// for a breakdown).
func parseStatsQuery(q url.Values, now time.Time) (statsQuery, error) {
	sq := statsQuery{step: time.Hour, n: DefaultBreakdown}
	one := func(name string) (string, bool, error) {
		v, ok := q[name]
		if ok && (len(v) != 1 || v[0] == "") {
			return "", false, fmt.Errorf("%w: %s must be given once, not empty", ErrInvalidOptions, name)
		}
		if !ok {
			return "", false, nil
		}
		return v[0], true, nil
	}
	at := func(name string, t *time.Time) error {
		v, ok, err := one(name)
		if err != nil || !ok {
			return err
		}
		if *t, err = time.Parse(time.RFC3339, v); err != nil {
			return fmt.Errorf("%w: %s %.64q is not an RFC 3339 time", ErrInvalidOptions, name, v)
		}
		return nil
	}
	if err := at("from", &sq.from); err != nil {
		return sq, err
	}
	if err := at("to", &sq.to); err != nil {
		return sq, err
	}
	if v, ok, err := one("step"); err != nil {
		return sq, err
	} else if ok {
		switch v {
		case "1h":
			sq.step = time.Hour
		case "24h", "1d":
			sq.step = 24 * time.Hour
		default:
			return sq, fmt.Errorf("%w: step %.16q (1h or 24h)", ErrInvalidOptions, v)
		}
	}
	v, ok, err := one("dim")
	if err != nil {
		return sq, err
	}
	sq.dim = Dimension(v)
	if v, given, err := one("n"); err != nil {
		return sq, err
	} else if given {
		if !ok {
			return sq, fmt.Errorf("%w: n without dim", ErrInvalidOptions)
		}
		if sq.n, err = strconv.Atoi(v); err != nil {
			return sq, fmt.Errorf("%w: n %.16q is not an integer", ErrInvalidOptions, v)
		}
	}
	if sq.to.IsZero() {
		sq.to = now
	}
	if sq.from.IsZero() {
		span := 24 * sq.step
		if ok {
			span = 30 * 24 * time.Hour
		}
		sq.from = sq.to.Add(-span)
	}
	return sq, nil
}

// analytics serves GET /api/links/{code}/stats: a series of clicks, or
// with dim a breakdown; owner-checked as history is.
func (h *handler) analytics(w http.ResponseWriter, r *http.Request) {
	op := h.s.obs.clicks
	if r.URL.Query().Has("dim") {
		op = h.s.obs.breakdown
	}
	ctx, call := op.Start(r.Context())
	code, key := r.PathValue("code"), h.apiKey(r)
	var res any
	owner, err := h.owner(r)
	var sq statsQuery
	if err == nil {
		sq, err = parseStatsQuery(r.URL.Query(), h.s.cfg.Now())
	}
	if err == nil {
		err = h.s.limitMisses(ctx, h.clientIP(r), func() error {
			if sq.dim != "" {
				cs, err := h.s.breakdown(ctx, key, sq.dim, sq.from, sq.to, sq.n, h.scoped, owner)
				res = breakdownResponse{Code: code, Dim: sq.dim, From: sq.from.UTC(), To: sq.to.UTC(), Values: cs}
				return err
			}
			ps, err := h.s.clicksSeries(ctx, key, sq.from, sq.to, sq.step, h.scoped, owner)
			res = seriesResponse{Code: code, From: sq.from.UTC(), To: sq.to.UTC(), Step: fmt.Sprint(sq.step.Hours()) + "h", Points: ps}
			return err
		})
	}
	if err != nil {
		writeError(w, err)
	} else {
		writeJSON(w, http.StatusOK, res)
	}
	call.End(err)
}
