package shortlink

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The API handler's routes that edit a link and read its history.

type updateRequest struct {
	URL          *string    `json:"url,omitzero"`
	TTLSeconds   *int64     `json:"ttl_seconds,omitzero"`
	ExpiresAt    *time.Time `json:"expires_at,omitzero"`
	NeverExpires bool       `json:"never_expires,omitzero"`
	MaxVisits    *int64     `json:"max_visits,omitzero"`
	Redirect     *int       `json:"redirect,omitzero"`
	Tags         *[]string  `json:"tags,omitzero"` // [] removes every tag
	IfVersion    int64      `json:"if_version,omitzero"`
}

// change converts the request as createRequest.options does.
func (req *updateRequest) change(actor string) (Update, error) {
	create := createRequest{TTLSeconds: req.TTLSeconds, ExpiresAt: req.ExpiresAt}
	o, err := create.options()
	if err != nil {
		return Update{}, err
	}
	u := Update{URL: req.URL, ExpiresAt: o.ExpiresAt, TTL: o.TTL, NeverExpires: req.NeverExpires,
		MaxVisits: req.MaxVisits, Redirect: req.Redirect, Actor: actor, IfVersion: req.IfVersion}
	if req.Tags != nil {
		u.Tags = append([]string{}, *req.Tags...) // non-nil: [] clears
	}
	return u, nil
}

func (h *handler) update(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.update.Start(r.Context())
	var l *Link
	owner, err := h.owner(r)
	if err == nil {
		err = h.s.limitMisses(ctx, h.clientIP(r), func() error {
			var req updateRequest
			if err := readJSON(w, r, &req); err != nil {
				return err
			}
			u, err := req.change(owner)
			if err != nil {
				return err
			}
			l, err = h.s.update(ctx, h.apiKey(r), u, h.scoped, owner)
			return err
		})
	}
	if l != nil { // made, even if the caches were not updated: say so with the link
		writeJSON(w, http.StatusOK, createResponse{Link: l, ShortURL: h.s.LinkURL(l)})
	} else {
		writeError(w, err)
	}
	call.End(err)
}

type historyResponse struct {
	Code       string     `json:"code"`
	Revisions  []Revision `json:"revisions"`
	NextBefore int64      `json:"next_before,omitempty"`
}

func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.history.Start(r.Context())
	var revs []Revision
	owner, err := h.owner(r)
	var o HistoryOptions
	if err == nil {
		o, err = historyQuery(r)
	}
	if err == nil {
		err = h.s.limitMisses(ctx, h.clientIP(r), func() (err error) {
			revs, err = h.s.history(ctx, h.apiKey(r), o, h.scoped, owner)
			return err
		})
	}
	if err != nil {
		writeError(w, err)
	} else {
		res := historyResponse{Code: r.PathValue("code"), Revisions: revs}
		// Versions have no gaps and the first edit makes version 2.
		if n := len(revs); n > 0 && revs[n-1].Version > 2 {
			res.NextBefore = revs[n-1].Version
		}
		writeJSON(w, http.StatusOK, res)
	}
	call.End(err)
}

// historyQuery reads before and limit, each at most once, as integers;
// other parameters are the service's (an authorizer may read them).
func historyQuery(r *http.Request) (HistoryOptions, error) {
	var o HistoryOptions
	q := r.URL.Query()
	for _, name := range []string{"before", "limit"} {
		v, ok := q[name]
		if !ok {
			continue
		}
		var n int64
		var err error
		if len(v) == 1 {
			n, err = strconv.ParseInt(v[0], 10, 64)
		}
		switch {
		case len(v) != 1 || err != nil:
			return o, fmt.Errorf("%w: %s must be given once, as an integer", ErrInvalidOptions, name)
		case name == "before":
			o.Before = n
		case n < 1 || n > MaxHistoryPage:
			return o, fmt.Errorf("%w: history limit %d outside 1..%d", ErrInvalidOptions, n, MaxHistoryPage)
		default:
			o.Limit = int(n)
		}
	}
	return o, nil
}
