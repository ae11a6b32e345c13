package shortlink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"
)

// RedirectHandler serves the public redirects:
//
//	GET    /{code}            302 (or the link's / service's status) to the long URL;
//	                          404 unknown, 410 expired, 429 (with Retry-After) when the
//	                          client's misses are used up — for every code, before any lookup
//	HEAD   /{code}            the same answer, but no click counted and no visit spent
//	GET    /{code}/qr         a QR code of the short URL: ?format=png (default) or svg,
//	                          &size=64..1024 pixels [256]; 400 for another format or size,
//	                          404/410/429 as for the redirect; no click counted
//
// The code is looked up on the domain of the request's Host (see Domains
// in the package documentation): with Config.Domains set, a Host that is
// none of the service's domains is 404 — it does not fall back to the
// default domain's link; without it, any Host is the default domain.
//
// clientIP extracts the rate-limit key from a request (set it when behind a
// trusted proxy); nil, or an empty answer, uses the connection's address,
// so that no request goes unlimited. Each request counts once as the
// operation redirect (see Observability in the package documentation).
func (s *Service) RedirectHandler(clientIP func(*http.Request) string) http.Handler {
	h := s.newHandler(nil, clientIP)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{code}", h.redirect)
	mux.HandleFunc("GET /{code}/qr", h.qr)
	return mux
}

// APIHandler serves the JSON API to manage links, each request on behalf
// of the owner authorize names:
//
//	POST   /api/links         {"url", "alias", "domain", "ttl_seconds", "expires_at", "max_visits", "redirect", "tags"}
//	                          (bounds as in Options; ttl_seconds 1..MaxLifetime/1s)
//	                          → 201 {"code", "short_url", "owner", "tags", …}; 400 (also for unknown, mis-cased
//	                          or repeated fields and data after the object), 409 alias taken,
//	                          413 over 16 KiB, 429 with Retry-After
//	GET    /api/links?tag=&cursor=&n=
//	                          → 200 {"links": [{"code", "short_url", …}], "next_cursor"}: the owner's links,
//	                          newest first (List; n 1..MaxListPage [20]; next_cursor absent after the last
//	                          page); 400 for a bad or repeated parameter or a cursor List did not issue
//	                          for this owner and tag
//	POST   /api/links/bulk    {"links": [create bodies]} (1..MaxBatch) → 200 {"results": [{"status",
//	                          "link": {"code", "short_url", …}} or {"status", "error"}]}, one per link in
//	                          order, each status as POST /api/links would answer (ShortenMany: not all
//	                          or nothing); 400 for a malformed body or batch, 413 over 512 KiB
//	GET    /api/links/{code}  → 200 {"code", "clicks"}
//	PATCH  /api/links/{code}  {"url", "ttl_seconds", "expires_at", "never_expires", "max_visits", "redirect",
//	                          "tags", "if_version"}, each optional (as in Update; null is absent), parsed as strictly
//	                          as the create body → 200 the link as it now is; 400, 409 when if_version
//	                          is not the link's version, 413
//	GET    /api/links/{code}/history?before=&limit=
//	                          → 200 {"code", "revisions": […], "next_before"}, newest first (History);
//	                          next_before, when there are older revisions, is the next page's before
//	GET    /api/links/{code}/stats?from=&to=&step=1h
//	                          → 200 {"code", "from", "to", "step", "points": [{"start", "clicks", "bots"}]}
//	                          (Clicks: from and to RFC 3339 [the 24 steps before now], step 1h or 24h)
//	GET    /api/links/{code}/stats?dim=referrer&n=10&from=&to=
//	                          → 200 {"code", "dim", "from", "to", "values": [{"value", "clicks", "bots"}]}
//	                          (Breakdown: [the 30 days before now], n 1..MaxBreakdown [10]); 400 for a
//	                          bad or repeated parameter
//	DELETE /api/links/{code}  → 204
//
// A link off the default domain is addressed with ?domain= on the code
// routes (404 for a domain not configured) and "domain" in a create body
// (400 for one not configured); links carry "domain" in JSON, and
// "short_url" is on their domain.
//
// authorize says who is asking: ok false answers 401 and does nothing; a
// link is created with the owner it returns, and only that owner reads or
// edits or deletes it, and the owner is the actor its edits record — for
// anyone else the code is 404, as for a code that does not exist, so the
// API confirms nothing about others' links. The block
// does no authentication: authorize is the service's (a session, an API
// key). The code routes are held to the miss limit like redirects;
// clientIP is as for RedirectHandler. Each request counts once, as the
// operation shorten, shorten_many (bulk), list, stats, update, history, clicks (the stats route), breakdown
// (the stats route with dim) or delete, refusals met before the Service's
// method — unauthorized, a malformed body, a spent miss budget — included.
func (s *Service) APIHandler(authorize func(*http.Request) (owner string, ok bool), clientIP func(*http.Request) string) http.Handler {
	if authorize == nil {
		authorize = func(*http.Request) (string, bool) { return "", false }
	}
	h := s.newHandler(authorize, clientIP)
	h.scoped = true
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/links", h.create)
	mux.HandleFunc("GET /api/links", h.list)
	mux.HandleFunc("POST /api/links/bulk", h.bulk)
	mux.HandleFunc("GET /api/links/{code}", h.stats)
	mux.HandleFunc("PATCH /api/links/{code}", h.update)
	mux.HandleFunc("GET /api/links/{code}/history", h.history)
	mux.HandleFunc("GET /api/links/{code}/stats", h.analytics)
	mux.HandleFunc("DELETE /api/links/{code}", h.delete)
	return mux
}

// Handler serves RedirectHandler's routes and APIHandler's with no
// authentication, as before owners existed: links are created with no
// owner, and any link can be read or deleted. Mount it behind yours.
//
// Deprecated: it serves the public redirects and the unauthenticated API
// from one handler. Mount RedirectHandler for the world and APIHandler,
// with the service's authorizer, behind its auth.
func (s *Service) Handler(clientIP func(*http.Request) string) http.Handler {
	h := s.newHandler(func(*http.Request) (string, bool) { return "", true }, clientIP)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{code}", h.redirect)
	mux.HandleFunc("GET /{code}/qr", h.qr)
	mux.HandleFunc("POST /api/links", h.create)
	mux.HandleFunc("GET /api/links/{code}", h.stats)
	mux.HandleFunc("PATCH /api/links/{code}", h.update)
	mux.HandleFunc("GET /api/links/{code}/history", h.history)
	mux.HandleFunc("GET /api/links/{code}/stats", h.analytics)
	mux.HandleFunc("DELETE /api/links/{code}", h.delete)
	return mux
}

func (s *Service) newHandler(authorize func(*http.Request) (string, bool), clientIP func(*http.Request) string) *handler {
	return &handler{s: s, authorize: authorize, clientIP: func(r *http.Request) string {
		if clientIP != nil {
			if ip := clientIP(r); ip != "" {
				return ip
			}
		}
		return remoteIP(r)
	}}
}

type handler struct {
	s         *Service
	authorize func(*http.Request) (owner string, ok bool) // nil on the redirect handler
	scoped    bool                                        // a request acts on its owner's links only
	clientIP  func(*http.Request) string
}

// owner asks authorize who is asking: ErrUnauthorized when nobody.
func (h *handler) owner(r *http.Request) (string, error) {
	owner, ok := h.authorize(r)
	if !ok {
		return "", ErrUnauthorized
	}
	return owner, nil
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (h *handler) redirect(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.redirect.Start(r.Context())
	// The route serves HEAD too: a safe request must not spend a visit or
	// count a click, and answers as GET would.
	l, err := h.s.resolveWith(ctx, h.hostKey(r), ResolveOptions{ClientIP: h.clientIP(r), Peek: r.Method != http.MethodGet, Request: r})
	if err != nil {
		writeError(w, err)
	} else {
		h.writeRedirect(w, l)
	}
	call.End(err)
}

// qr serves a link's QR code. The image never changes for a code, so
// caches may keep it an hour; whether the link still exists is asked on
// every request that reaches the service.
func (h *handler) qr(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if len(q["format"]) > 1 || len(q["size"]) > 1 {
		writeError(w, fmt.Errorf("%w: format and size may be given once each", ErrInvalidOptions))
		return
	}
	format, size := QRFormat(q.Get("format")), DefaultQRSize
	if format == "" {
		format = QRPNG
	}
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, fmt.Errorf("%w: QR size %q", ErrInvalidOptions, v))
			return
		}
		size = n
	}
	img, err := h.s.QRCode(r.Context(), h.hostKey(r), format, size, ResolveOptions{ClientIP: h.clientIP(r)})
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", map[QRFormat]string{QRPNG: "image/png", QRSVG: "image/svg+xml"}[format])
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(img)
}

// hostKey is the key of the redirect routes' code on the domain of the
// request's Host; "" (not found) for an unknown Host when Config.Domains
// is set, or a path that is no code.
func (h *handler) hostKey(r *http.Request) string {
	domain, ok := h.s.domains.byHost(r.Host)
	code := r.PathValue("code")
	if !ok || !validCode(code) {
		return ""
	}
	return h.s.Key(domain, code)
}

// apiKey is the key of the API routes' code on the domain of ?domain=
// [the default]; "" (not found) for a domain not configured, a repeated
// domain parameter or a path that is no code.
func (h *handler) apiKey(r *http.Request) string {
	code, ds := r.PathValue("code"), r.URL.Query()["domain"]
	if !validCode(code) || len(ds) > 1 {
		return ""
	}
	var domain string
	if len(ds) == 1 {
		var err error
		if domain, err = h.s.domains.option(ds[0]); err != nil {
			return ""
		}
	}
	return h.s.Key(domain, code)
}

func (h *handler) writeRedirect(w http.ResponseWriter, l *Link) {
	status := l.Redirect
	if status == 0 {
		status = h.s.cfg.Redirect
	}
	w.Header().Set("Cache-Control", h.s.cacheControl(l, status))
	w.Header().Set("Location", l.URL)
	w.WriteHeader(status)
}

// cacheControl lets browsers keep permanent redirects for PermanentMaxAge
// and temporary ones for TemporaryMaxAge, never past the link's expiry;
// a link with a visit limit must reach the server every time.
func (s *Service) cacheControl(l *Link, status int) string {
	if l.MaxVisits > 0 {
		return "no-store"
	}
	age, scope := s.cfg.TemporaryMaxAge, "private"
	if status == http.StatusMovedPermanently || status == http.StatusPermanentRedirect {
		age, scope = s.cfg.PermanentMaxAge, "public"
	}
	if !l.ExpiresAt.IsZero() {
		age = max(0, min(age, l.ExpiresAt.Sub(s.cfg.Now())))
	}
	return scope + ", max-age=" + strconv.FormatInt(int64(age/time.Second), 10)
}

type createRequest struct {
	URL        string     `json:"url"`
	Alias      string     `json:"alias,omitzero"`
	TTLSeconds *int64     `json:"ttl_seconds,omitzero"` // 1..MaxLifetime in seconds
	ExpiresAt  *time.Time `json:"expires_at,omitzero"`  // in the future, at most MaxLifetime away
	MaxVisits  int64      `json:"max_visits,omitzero"`
	Redirect   int        `json:"redirect,omitzero"`
	Tags       []string   `json:"tags,omitzero"`
	Domain     string     `json:"domain,omitzero"` // Options.Domain
}

// options checks what Options cannot tell from its zero values — a given
// but zero TTL or expiry — and converts seconds without overflowing.
func (req *createRequest) options() (Options, error) {
	o := Options{Alias: req.Alias, Domain: req.Domain, MaxVisits: req.MaxVisits, Redirect: req.Redirect, Tags: req.Tags}
	if n := req.TTLSeconds; n != nil {
		if *n < 1 || *n > int64(MaxLifetime/time.Second) {
			return Options{}, fmt.Errorf("%w: ttl_seconds %d outside 1..%d", ErrInvalidOptions, *n, int64(MaxLifetime/time.Second))
		}
		o.TTL = time.Duration(*n) * time.Second
	}
	if at := req.ExpiresAt; at != nil {
		if at.IsZero() {
			return Options{}, fmt.Errorf("%w: expires_at %v is not in the future", ErrInvalidOptions, *at)
		}
		o.ExpiresAt = *at
	}
	return o, nil
}

type createResponse struct {
	*Link
	ShortURL string `json:"short_url"`
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.shorten.Start(r.Context())
	l, err := h.shorten(ctx, w, r)
	if err != nil {
		writeError(w, err)
	} else {
		writeJSON(w, http.StatusCreated, createResponse{Link: l, ShortURL: h.s.LinkURL(l)})
	}
	call.End(err)
}

func (h *handler) shorten(ctx context.Context, w http.ResponseWriter, r *http.Request) (*Link, error) {
	owner, err := h.owner(r)
	if err != nil {
		return nil, err
	}
	var req createRequest
	if err := readJSON(w, r, &req); err != nil {
		return nil, err
	}
	o, err := req.options()
	if err != nil {
		return nil, err
	}
	o.ClientIP, o.Owner = h.clientIP(r), owner
	return h.s.shorten(ctx, req.URL, o)
}

// stats and delete answer 404 for unknown codes as redirects do, so they
// are held to the same miss limit.
func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.stats.Start(r.Context())
	var st Stats
	owner, err := h.owner(r)
	if err == nil {
		err = h.s.limitMisses(ctx, h.clientIP(r), func() (err error) {
			st, err = h.s.linkStats(ctx, h.apiKey(r), h.scoped, owner)
			return err
		})
	}
	if err != nil {
		writeError(w, err)
	} else {
		writeJSON(w, http.StatusOK, st)
	}
	call.End(err)
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.del.Start(r.Context())
	owner, err := h.owner(r)
	if err == nil {
		err = h.s.limitMisses(ctx, h.clientIP(r), func() error { return h.s.deleteLink(ctx, h.apiKey(r), h.scoped, owner) })
	}
	if err != nil {
		writeError(w, err)
	} else {
		w.WriteHeader(http.StatusNoContent)
	}
	call.End(err)
}

func writeError(w http.ResponseWriter, err error) {
	var limited *RateLimitError
	if errors.As(err, &limited) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(max(1, math.Ceil(limited.RetryAfter.Seconds()))), 10))
	}
	status, msg := errorStatus(err)
	writeJSON(w, status, map[string]string{"error": msg})
}

// errorStatus is the HTTP status of err and the message to show with it.
func errorStatus(err error) (int, string) {
	status := http.StatusInternalServerError
	var tooBig *http.MaxBytesError
	var limited *RateLimitError
	switch {
	case errors.As(err, &tooBig):
		status = http.StatusRequestEntityTooLarge
	case errors.As(err, &limited):
		status = http.StatusTooManyRequests
	case errors.Is(err, ErrUnauthorized):
		status = http.StatusUnauthorized
	case errors.Is(err, ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, ErrExpired):
		status = http.StatusGone
	case errors.Is(err, ErrRateLimited):
		status = http.StatusTooManyRequests
	case errors.Is(err, ErrAliasTaken), errors.Is(err, ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, errBody), errors.Is(err, ErrInvalidURL), errors.Is(err, ErrInvalidAlias), errors.Is(err, ErrInvalidOptions):
		status = http.StatusBadRequest
	}
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error" // do not leak infrastructure details
	}
	return status, msg
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
