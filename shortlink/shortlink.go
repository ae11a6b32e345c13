package shortlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

var (
	// ErrInvalidURL is returned for a long URL Shorten refuses.
	ErrInvalidURL = errors.New("shortlink: invalid URL")
	// ErrBlocked is wrapped (with ErrInvalidURL) for a blocklisted domain.
	ErrBlocked = errors.New("shortlink: domain is blocked")
	// ErrInvalidAlias is returned for a malformed or reserved custom alias.
	ErrInvalidAlias = errors.New("shortlink: invalid alias")
	// ErrAliasTaken is returned when a custom alias is in use.
	ErrAliasTaken = errors.New("shortlink: alias taken")
	// ErrNotFound is returned for a code that does not exist.
	ErrNotFound = errors.New("shortlink: not found")
	// ErrUnauthorized: APIHandler's authorizer named nobody (401).
	ErrUnauthorized = errors.New("shortlink: unauthorized")
	// ErrExpired is returned for a link past its expiry or visit limit.
	ErrExpired = errors.New("shortlink: link expired")
	// ErrMaxVisits wraps ErrExpired for a link that used up its visits.
	ErrMaxVisits = fmt.Errorf("%w: visit limit reached", ErrExpired)
	// ErrRateLimited is wrapped by a *RateLimitError when the caller's IP is
	// over its limit.
	ErrRateLimited = errors.New("shortlink: rate limited")
	// ErrInvalidOptions is returned for contradictory or out-of-range options
	// of a link.
	ErrInvalidOptions = errors.New("shortlink: invalid options")
	// ErrConfig is wrapped by every configuration error of New.
	ErrConfig = errors.New("shortlink: bad config")
	// ErrClosed is returned by Shorten and Resolve after Close.
	ErrClosed = errors.New("shortlink: service closed")
)

// CodeStyle chooses how generated codes look.
type CodeStyle int

const (
	// PermutedCodes (default): fixed-length codes, a keyed permutation of a
	// segment counter (idgen.ShortCodes) — 7 characters hold 3.5e12 links.
	PermutedCodes CodeStyle = iota
	// SnowflakeCodes: base62 of a snowflake id, 11 characters, no shared
	// counter needed.
	SnowflakeCodes
)

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	// BaseURL is the service's public address, e.g. "https://sho.rt"; short
	// URLs are BaseURL + "/" + code, and links to its host are refused.
	// Required.
	BaseURL string
	// OwnHosts are further host names of this service (refused as targets,
	// so links cannot loop).
	OwnHosts []string
	// Domains are further short domains of this deployment, beside the
	// host of BaseURL (the default domain): DNS names without port, any
	// case (stored lower-cased), no two alike; the BaseURL's host may be
	// listed. A link belongs to one domain (Options.Domain), the same code
	// may be taken on each, and RedirectHandler resolves by the request's
	// Host — with Domains set, a Host that is none of them is 404. They
	// are refused as targets, as OwnHosts are. See "Domains" in the
	// package documentation.
	Domains []string
	// Blocklist are domains refused as targets, with their subdomains.
	Blocklist []string
	// Reserved aliases, added to DefaultReserved.
	Reserved []string
	// Namespace prefixes every Redis key.
	Namespace string

	// Codes picks the code style [PermutedCodes].
	Codes CodeStyle
	// CodeLength of permuted codes [7].
	CodeLength int
	// CodeKey keys the permutation, a secret: whoever knows it can list the
	// codes in the order they are issued. Zero (the default) draws a random
	// key on the first Shorten of a namespace and stores it in the first
	// database (table shortlink_meta, made by Migrate); processes starting
	// together agree on one key, and restarts keep it. Changing the key is
	// safe — codes are stored, not recomputed — but a new permutation can
	// issue a code taken under the old one, which costs a retry.
	CodeKey uint64
	// SegmentStep is how many counters one lease from SQL holds [1000].
	SegmentStep int64
	// SnowflakeNode is this process's node id for SnowflakeCodes (0..1023).
	SnowflakeNode int64

	// TablesPerDB is the link tables in each database [256 / databases].
	TablesPerDB int

	// Redirect is the default status: 302 (counted on every click) or 301
	// (cached by browsers for good) [302]. 307 and 308 are accepted too.
	Redirect int
	// PermanentMaxAge is Cache-Control max-age for 301/308 [24h];
	// TemporaryMaxAge for 302/307 [0]. Both are capped at the link's expiry;
	// links with a visit limit are never cacheable.
	PermanentMaxAge time.Duration
	TemporaryMaxAge time.Duration

	// LocalTTL bounds how long this process serves a link from memory
	// after it changed elsewhere [10s; negative turns the local cache off];
	// RedisTTL how long Redis keeps it
	// [24h]; NegativeTTL how long a miss is remembered [30s].
	LocalTTL    time.Duration
	RedisTTL    time.Duration
	NegativeTTL time.Duration
	// LocalEntries bounds the in-process cache [100,000 links].
	LocalEntries int64

	// CreateLimit per client IP [10/s]. MissLimit, the 404s a client IP may
	// cause (ResolveWith with a ClientIP, the handler's code routes); with
	// none left it is refused everything, before any lookup [60/min]. An
	// IPv6 client is limited by its /64, which one subscriber usually holds
	// whole.
	CreateLimit redis_rate.Limit
	MissLimit   redis_rate.Limit
	// The local miss filter (on by default) skips the Redis read of a
	// client's miss budget before a lookup when the client has not missed
	// through this Service within the budget's refill time (Burst × Period
	// / Rate): a client that never misses — nearly every visitor — costs
	// no Redis call, and a cached redirect none at all. The cost: a client
	// that spent its budget through other processes gets one lookup on
	// this one before it is refused here too (one per process, while it
	// keeps missing), so it can tell one more code's existence per
	// process: with N app servers a walker learns at most N codes' fate
	// per refill time beyond the budget, against none with SharedMissCheck.
	// The filter holds up to LocalMissClients clients [1,000,000]; past
	// that it checks every client in Redis until entries expire.
	//
	// SharedMissCheck turns the filter off: every lookup with a ClientIP
	// reads the budget in Redis first (exact across processes, one Redis
	// round trip per redirect, cached or not).
	SharedMissCheck  bool
	LocalMissClients int
	// Deprecated: the local miss filter is now the default; this field has
	// no effect (set SharedMissCheck for the exact, shared check).
	LocalMissFilter bool

	// FlushEvery is how often counted clicks, and the analytics rollup,
	// are written to SQL [1s].
	FlushEvery time.Duration

	// NoAnalytics turns the per-link analytics off (see "Analytics" in the
	// package documentation): no rollup in memory, nothing flushed, and
	// Clicks, Breakdown and Uniques read only what was recorded before.
	// They are on by default: on the redirect path they are map updates
	// in memory (0.5–1 µs in-process, as measured there), no Redis or SQL
	// call.
	NoAnalytics bool
	// Country names the country a request comes from, as two letters
	// (anything else is recorded as ValueUnknown) [CountryFromHeaders:
	// CF-IPCountry, then X-Country]. See ExampleConfig_country for a
	// GeoIP database behind it.
	Country func(*http.Request) string
	// AnalyticsValues bounds the distinct values of one dimension kept in
	// memory for one link and one hour between flushes [100]; the clicks
	// of further values are counted under ValueOther, so a flood of forged
	// Referers cannot grow memory without bound.
	AnalyticsValues int
	// UniquesTTL is how long a day's unique-visitor HyperLogLog (at most
	// 12 KB in Redis, less while it holds few visitors) is kept after the
	// day ends [400 days].
	UniquesTTL time.Duration
	// OnError receives errors of background work (click flushes) and of
	// the miss limiter, which lets calls through when it fails.
	OnError func(error)
	// Logger, when set, hears of background work: a click flush that
	// failed (Warn, with how many codes' counts it keeps for the next) and
	// the first that succeeds after failures (Info). Nothing on the
	// redirect path logs. Nil: silent.
	Logger *slog.Logger
	// Now is the clock [time.Now].
	Now func() time.Time
	// MeterProvider and TracerProvider receive the block's metrics and
	// spans [nil: OpenTelemetry's global providers; while the service has
	// installed none, an operation allocates nothing and reads no clock].
	// See "Observability" in the package documentation for the instruments
	// and their cost.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Service shortens and resolves links. It is safe for concurrent use; Close
// it to flush counted clicks and stop its goroutines.
type Service struct {
	cfg       Config
	base      *url.URL
	rdb       redis.UniversalClient
	router    *shard.Router
	owners    *shard.Router // the owner index, links_owner_NNN
	segments  *idgen.SQLSource
	space     keys.Space
	limiter   *redis_rate.Limiter
	misses    *missFilter // nil with Config.SharedMissCheck
	local     *ristretto.Cache[string, *cached]
	qrMu      sync.Mutex                       // guards qrs
	qrs       *ristretto.Cache[string, []byte] // rendered QR codes, made by the first QRCode
	flight    singleflight.Group
	clicks    *clickCounter
	analytics *analytics // nil with Config.NoAnalytics
	stats     cacheCounters
	obs       *instruments
	log       *slog.Logger

	domains  domains
	ownHosts hostSet
	blocked  hostSet
	reserved map[string]bool

	genMu     sync.Mutex // guards the generators and closed
	codes     *idgen.ShortCodes
	segment   *idgen.Segment // feeds codes
	snowflake *idgen.Snowflake

	cursorMu  sync.Mutex // guards cursorKey
	cursorKey []byte     // signs List cursors, read by the first List

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// New is NewService with its first two arguments the other way round.
//
// Deprecated: use NewService, whose clients come in the order every block
// takes them (Redis, then SQL, then Config). New goes in a later release.
func New(dbs []*sqlx.DB, rdb redis.UniversalClient, cfg Config) (*Service, error) {
	return NewService(rdb, dbs, cfg)
}

// NewService returns a Service caching links in rdb and storing them in
// dbs (N databases, each with TablesPerDB link tables). Call Migrate once
// to create the tables.
func NewService(rdb redis.UniversalClient, dbs []*sqlx.DB, cfg Config) (*Service, error) {
	if err := applyDefaults(&cfg); err != nil {
		return nil, err
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("%w: BaseURL %q must be an absolute http(s) URL", ErrConfig, cfg.BaseURL)
	}
	doms, err := newDomains(base.Hostname(), cfg.Domains)
	if err != nil {
		return nil, err
	}
	own, err := newHostSet(append(append([]string{base.Hostname()}, cfg.OwnHosts...), cfg.Domains...), false)
	if err != nil {
		return nil, fmt.Errorf("%w: own host %w", ErrConfig, err)
	}
	blocked, err := newHostSet(cfg.Blocklist, true)
	if err != nil {
		return nil, fmt.Errorf("%w: blocklist entry %w", ErrConfig, err)
	}
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrConfig)
	}
	for _, db := range dbs {
		if err := sqlutil.Check(db, "shortlink"); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	router, err := shard.New(dbs, shard.Config{Table: "links", TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	owners, err := shard.New(dbs, shard.Config{Table: ownersTable, TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	segments, err := idgen.NewSQLSource(dbs[0], "shortlink_segments")
	if err != nil {
		return nil, err
	}
	local, err := ristretto.NewCache(&ristretto.Config[string, *cached]{
		NumCounters: 10 * cfg.LocalEntries, MaxCost: cfg.LocalEntries, BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("shortlink: local cache: %w", err)
	}
	s := &Service{
		cfg: cfg, base: base, rdb: rdb, router: router, owners: owners, segments: segments,
		space: keys.NewSpace(keys.Join(cfg.Namespace, "shortlink")), limiter: redis_rate.NewLimiter(rdb), local: local,
		domains: doms, ownHosts: own, blocked: blocked,
		reserved: set(append(append([]string(nil), DefaultReserved...), cfg.Reserved...)),
	}
	s.obs = newInstruments(&s.stats, cfg.MeterProvider, cfg.TracerProvider)
	s.log = obs.Logger(cfg.Logger, "shortlink")
	if !cfg.SharedMissCheck {
		l := cfg.MissLimit
		s.misses = newMissFilter(time.Duration(l.Burst)*l.Period/time.Duration(l.Rate), cfg.LocalMissClients)
	}
	s.clicks = newClickCounter(s)
	if !cfg.NoAnalytics {
		s.analytics = newAnalytics(s)
	}
	return s, nil
}

func applyDefaults(cfg *Config) error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if cfg.CodeLength == 0 {
		cfg.CodeLength = 7
	}
	if cfg.SegmentStep == 0 {
		cfg.SegmentStep = 1000
	}
	if cfg.Redirect == 0 {
		cfg.Redirect = 302
	}
	def(&cfg.PermanentMaxAge, 24*time.Hour)
	def(&cfg.LocalTTL, 10*time.Second)
	def(&cfg.RedisTTL, 24*time.Hour)
	def(&cfg.NegativeTTL, 30*time.Second)
	def(&cfg.FlushEvery, time.Second)
	if cfg.LocalEntries == 0 {
		cfg.LocalEntries = 100_000
	}
	if cfg.CreateLimit.IsZero() {
		cfg.CreateLimit = redis_rate.PerSecond(10)
	}
	if cfg.MissLimit.IsZero() {
		cfg.MissLimit = redis_rate.PerMinute(60)
	}
	if cfg.LocalMissClients == 0 {
		cfg.LocalMissClients = 1_000_000
	}
	if cfg.AnalyticsValues == 0 {
		cfg.AnalyticsValues = 100
	}
	def(&cfg.UniquesTTL, 400*24*time.Hour)
	if cfg.Country == nil {
		cfg.Country = CountryFromHeaders
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return validateConfig(cfg)
}

func validateConfig(cfg *Config) error {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(why, args...))
	}
	switch {
	case !validRedirect(cfg.Redirect):
		return bad("redirect status %d (301, 302, 307 or 308)", cfg.Redirect)
	case cfg.Codes != PermutedCodes && cfg.Codes != SnowflakeCodes:
		return bad("code style %d", cfg.Codes)
	case cfg.SegmentStep < 1:
		return bad("SegmentStep %d < 1", cfg.SegmentStep)
	case cfg.SnowflakeNode < 0 || cfg.SnowflakeNode > idgen.MaxNodeID:
		return bad("SnowflakeNode %d outside 0..%d", cfg.SnowflakeNode, idgen.MaxNodeID)
	case cfg.LocalEntries < 1:
		return bad("LocalEntries %d < 1", cfg.LocalEntries)
	case cfg.PermanentMaxAge < 0 || cfg.TemporaryMaxAge < 0 || cfg.RedisTTL < 0 || cfg.NegativeTTL < 0 || cfg.FlushEvery < 0:
		return bad("negative duration (only LocalTTL may be negative)")
	case !validLimit(cfg.CreateLimit) || !validLimit(cfg.MissLimit):
		return bad("rate limits need a positive rate, burst and period")
	case cfg.LocalMissClients < 1:
		return bad("LocalMissClients %d < 1", cfg.LocalMissClients)
	case cfg.AnalyticsValues < 1:
		return bad("AnalyticsValues %d < 1", cfg.AnalyticsValues)
	case cfg.UniquesTTL < 0:
		return bad("negative UniquesTTL")
	}
	if cfg.Codes == PermutedCodes {
		// idgen owns the code length's range; any non-zero key will do here.
		if _, err := idgen.NewShortCodes(nil, idgen.ShortCodeConfig{Length: cfg.CodeLength, Key: 1}); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

func validOwner(owner string) bool {
	if len(owner) > MaxOwner || !utf8.ValidString(owner) {
		return false
	}
	for _, r := range owner {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func validLimit(l redis_rate.Limit) bool { return l.Rate > 0 && l.Burst > 0 && l.Period > 0 }

func validRedirect(code int) bool { return code == 301 || code == 302 || code == 307 || code == 308 }

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[strings.ToLower(x)] = true
	}
	return m
}

// Migrate creates the link tables and, beside each, its history table and
// its analytics tables (rollups and applied batches), the owner index
// tables (links_owner_NNN, see List), the code counter table and the
// table of the stored secrets if they do not exist, and adds the columns of
// later versions (owner, version, tags; the history's old_tags and
// new_tags) to tables made before them. The first Migrate that makes the
// owner index also fills it from the links that exist (one pass over every
// link table; see List). Processes migrating at once are safe.
func (s *Service) Migrate(ctx context.Context) error {
	if err := s.segments.CreateTable(ctx); err != nil {
		return err
	}
	if err := s.createMeta(ctx); err != nil {
		return err
	}
	db := s.router.All()[0].DB
	if err := s.router.CreateTables(ctx, linksDDL(db)); err != nil {
		return err
	}
	mysql := sqlutil.IsMySQL(db)
	for _, c := range []struct{ suffix, name, def string }{
		{"", "owner", ownerColumn(db)},
		{"", "version", versionColumn},
		{"", "tags", "tags " + tagsColumnType(mysql)},
	} {
		if err := s.addColumn(ctx, c.suffix, c.name, c.def); err != nil {
			return err
		}
	}
	for _, ddl := range []string{historyDDL(db), clicksDDL(db), appliedDDL(db)} {
		if err := s.router.CreateTables(ctx, ddl); err != nil {
			return err
		}
	}
	for _, name := range []string{"old_tags", "new_tags"} {
		if err := s.addColumn(ctx, historySuffix, name, name+" "+tagsColumnType(mysql)); err != nil {
			return err
		}
	}
	return s.migrateOwnerIndex(ctx)
}

// Shutdown stops the Service's goroutines — the code segment's prefetch,
// the click and analytics flushers after a last flush (which ctx bounds:
// the analytics flush writes a batch kept from a failed flush, then the
// rest), the local
// cache's — and the reporting of its cache lookups metric, and returns the
// last flush's error. Shorten and Resolve return ErrClosed from then on; a
// click of a Resolve still in flight when Shutdown starts may go
// uncounted. Shutdown and Close are safe to call more than once, in any
// mix; later calls return the first one's error.
func (s *Service) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.genMu.Lock()
		s.closed.Store(true)
		seg, sf := s.segment, s.snowflake
		s.genMu.Unlock()
		if seg != nil {
			seg.Close()
		}
		if sf != nil {
			sf.Close()
		}
		s.closeErr = s.clicks.close(ctx)
		if s.analytics != nil {
			s.closeErr = errors.Join(s.closeErr, s.analytics.close(ctx))
		}
		s.local.Close()
		s.qrMu.Lock()
		if s.qrs != nil {
			s.qrs.Close()
		}
		s.qrMu.Unlock()
		s.obs.close()
	})
	return s.closeErr
}

// Close is Shutdown with no deadline on the last flush: the Service is an
// io.Closer.
func (s *Service) Close() error { return s.Shutdown(context.Background()) }

// ShortURL returns the public short URL of code on the default domain, or
// of a Key on its domain (LinkURL gives a Link's).
func (s *Service) ShortURL(code string) string {
	c, domain := s.split(code)
	return s.urlOf(domain, c)
}

// Link is a stored short link.
type Link struct {
	Code      string    `json:"code"`             // as visitors write it, without the domain
	Domain    string    `json:"domain,omitempty"` // Options.Domain, lower case; "" for the default domain
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`  // zero: never
	MaxVisits int64     `json:"max_visits,omitempty"` // 0: unlimited
	Redirect  int       `json:"redirect,omitempty"`   // 0: the service default
	Owner     string    `json:"owner,omitempty"`      // Options.Owner; "" for none
	Version   int64     `json:"version"`              // 1 when made, one more with each Update
	Tags      []string  `json:"tags,omitempty"`       // normalised, sorted (Options.Tags)
}

// Bounds of Options: a link expires at most MaxLifetime after it is made,
// and a visit limit is at most MaxVisitLimit (the largest integer the visit
// counter's Lua arithmetic, in float64, holds exactly).
const (
	MaxLifetime   = 100 * 365 * 24 * time.Hour
	MaxVisitLimit = 1<<53 - 1
)

// Options are Shorten's optional settings.
type Options struct {
	// Alias is a custom code (3..64 of A-Z a-z 0-9 - _, not reserved;
	// at most 55 on a domain other than the default, whose key must fit
	// the code column).
	Alias string
	// Domain is the short domain the link belongs to: "" (or the host of
	// BaseURL) for the default, else one of Config.Domains, any case.
	Domain string
	// ExpiresAt or TTL (not both) make the link expire. The expiry, to the
	// millisecond, must be in the future and at most MaxLifetime away.
	ExpiresAt time.Time
	TTL       time.Duration
	// MaxVisits in 1..MaxVisitLimit makes the link expire after that many
	// redirects, enforced exactly under concurrency; 0 is no limit.
	MaxVisits int64
	// Redirect overrides the service's redirect status for this link.
	Redirect int
	// ClientIP, when set, is rate-limited to Config.CreateLimit.
	ClientIP string
	// Owner is who the link belongs to (the caller's account id, at most
	// MaxOwner bytes of UTF-8 without control characters; "" for none): the
	// API handler lets only its owner read or delete it. The block does no
	// authentication: the caller says who the owner is.
	Owner string
	// Tags label the link, for List's tag filter: at most MaxTags, each
	// at most MaxTagLen bytes of UTF-8 without control characters. They
	// are stored normalised: trimmed of surrounding white space,
	// lower-cased (strings.ToLower), de-duplicated and sorted; a tag
	// empty after trimming is refused.
	Tags []string
}

// MaxOwner is the longest Options.Owner, in bytes.
const MaxOwner = 128

// Shorten stores a link to longURL and returns it. Bad input is refused
// before anything is written.
func (s *Service) Shorten(ctx context.Context, longURL string, o Options) (*Link, error) {
	ctx, call := s.obs.shorten.Start(ctx)
	l, err := s.shorten(ctx, longURL, o)
	return l, call.End(err)
}

func (s *Service) shorten(ctx context.Context, longURL string, o Options) (*Link, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	now := s.cfg.Now()
	target, err := s.normalizeURL(longURL)
	if err != nil {
		return nil, err
	}
	expires, err := expiry(now, o)
	if err != nil {
		return nil, err
	}
	switch {
	case o.MaxVisits < 0 || o.MaxVisits > MaxVisitLimit:
		return nil, fmt.Errorf("%w: MaxVisits %d outside 0..%d", ErrInvalidOptions, o.MaxVisits, MaxVisitLimit)
	case o.Redirect != 0 && !validRedirect(o.Redirect):
		return nil, fmt.Errorf("%w: redirect status %d", ErrInvalidOptions, o.Redirect)
	case !validOwner(o.Owner):
		return nil, fmt.Errorf("%w: owner %.64q (at most %d bytes of UTF-8, no control characters)", ErrInvalidOptions, o.Owner, MaxOwner)
	}
	tags, err := normalizeTags(o.Tags)
	if err != nil {
		return nil, err
	}
	if len(tags) == 0 {
		tags = nil
	}
	domain, err := s.domains.option(o.Domain)
	if err != nil {
		return nil, err
	}
	l := &Link{Domain: domain, URL: target, CreatedAt: now.Truncate(time.Millisecond), ExpiresAt: expires, MaxVisits: o.MaxVisits, Redirect: o.Redirect, Owner: o.Owner, Version: 1, Tags: tags}
	if o.Alias != "" {
		if err := s.validateAlias(o.Alias); err != nil {
			return nil, err
		}
		if domain != "" && len(o.Alias) > maxDomainAlias {
			return nil, fmt.Errorf("%w: alias of %d characters on domain %s (at most %d off the default domain)", ErrInvalidOptions, len(o.Alias), domain, maxDomainAlias)
		}
	}
	if o.ClientIP != "" {
		if err := s.allow(ctx, "create", o.ClientIP, s.cfg.CreateLimit); err != nil {
			return nil, err
		}
	}
	if o.Alias != "" {
		l.Code = o.Alias
		if err := s.indexLink(ctx, l, indexTags(l)); err != nil {
			return nil, err
		}
		if err := s.insert(ctx, l); err != nil {
			if errors.Is(err, errDuplicate) {
				return nil, fmt.Errorf("%w: %q", ErrAliasTaken, o.Alias)
			}
			return nil, err
		}
		return l, s.forget(ctx, s.keyOf(l))
	}
	// A generated code can only collide with a custom alias that happens
	// to look like one; take the next code then.
	for range 5 {
		if l.Code, err = s.nextCode(ctx); err != nil {
			return nil, err
		}
		if err := s.indexLink(ctx, l, indexTags(l)); err != nil {
			return nil, err
		}
		err = s.insert(ctx, l)
		if err == nil {
			return l, s.forget(ctx, s.keyOf(l))
		}
		if !errors.Is(err, errDuplicate) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("shortlink: 5 generated codes in a row were taken: %w", err)
}

// expiry returns when a link made at now with o expires (zero: never): to the
// millisecond, after now and at most MaxLifetime later.
func expiry(now time.Time, o Options) (time.Time, error) {
	var at time.Time
	switch {
	case !o.ExpiresAt.IsZero() && o.TTL != 0:
		return time.Time{}, fmt.Errorf("%w: both ExpiresAt and TTL", ErrInvalidOptions)
	case o.TTL != 0:
		if o.TTL < 0 || o.TTL > MaxLifetime {
			return time.Time{}, fmt.Errorf("%w: TTL %v outside (0, %v]", ErrInvalidOptions, o.TTL, MaxLifetime)
		}
		at = now.Add(o.TTL)
	case !o.ExpiresAt.IsZero():
		at = o.ExpiresAt
	default:
		return time.Time{}, nil
	}
	at = at.Truncate(time.Millisecond)
	if !at.After(now) || at.Sub(now) > MaxLifetime {
		return time.Time{}, fmt.Errorf("%w: expiry %v is not in the next %v", ErrInvalidOptions, at.UTC(), MaxLifetime)
	}
	return at, nil
}

func (s *Service) nextCode(ctx context.Context) (string, error) {
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if s.closed.Load() {
		return "", ErrClosed
	}
	if s.cfg.Codes == SnowflakeCodes {
		if s.snowflake == nil {
			sf, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: s.cfg.SnowflakeNode})
			if err != nil {
				return "", err
			}
			s.snowflake = sf
		}
		id, err := s.snowflake.Next(ctx)
		return idgen.EncodeBase62(uint64(id)), err
	}
	if s.codes == nil {
		key := s.cfg.CodeKey
		if key == 0 {
			var err error
			if key, err = s.storedCodeKey(ctx); err != nil {
				return "", err
			}
		}
		seg, err := idgen.NewSegment(ctx, s.segments, idgen.SegmentConfig{Tag: "links", Step: s.cfg.SegmentStep, MaxStep: s.cfg.SegmentStep})
		if err != nil {
			return "", err
		}
		if s.codes, err = idgen.NewShortCodes(seg, idgen.ShortCodeConfig{Length: s.cfg.CodeLength, Key: key}); err != nil {
			seg.Close()
			return "", err
		}
		s.segment = seg
	}
	return s.codes.Next(ctx)
}

// Resolve returns the link of code and counts the visit. Unknown codes give
// ErrNotFound, expired links or used-up visit limits ErrExpired. It is
// ResolveWith without options: no miss limit.
func (s *Service) Resolve(ctx context.Context, code string) (*Link, error) {
	return s.ResolveWith(ctx, code, ResolveOptions{})
}

// ResolveOptions are ResolveWith's optional settings.
type ResolveOptions struct {
	// ClientIP, when set, holds the caller to Config.MissLimit, so that
	// codes cannot be walked: a client with no miss budget left is refused
	// with a *RateLimitError before any lookup, for existing codes too, and
	// every ErrNotFound costs it one unit.
	ClientIP string
	// Peek answers as a visit would without being one: no click is
	// counted and no visit of a MaxVisits link spent (for HEAD requests).
	Peek bool
	// Request, when set, is the visitor's request, for the analytics: its
	// Referer, User-Agent and country (Config.Country) are recorded with
	// the click, and with ClientIP it counts towards the day's unique
	// visitors. Without it a click is recorded as direct, from an unknown
	// country, device other, and no visitor.
	Request *http.Request
}

// ResolveWith is Resolve with options.
func (s *Service) ResolveWith(ctx context.Context, code string, o ResolveOptions) (*Link, error) {
	ctx, call := s.obs.resolve.Start(ctx)
	l, err := s.resolveWith(ctx, code, o)
	return l, call.End(err)
}

func (s *Service) resolveWith(ctx context.Context, code string, o ResolveOptions) (*Link, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	var l *Link
	err := s.limitMisses(ctx, o.ClientIP, func() (err error) {
		l, err = s.find(ctx, code)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !l.ExpiresAt.IsZero() && !s.cfg.Now().Before(l.ExpiresAt) {
		return nil, ErrExpired
	}
	switch {
	case o.Peek && l.MaxVisits > 0:
		err = s.visitsLeft(ctx, l)
	case l.MaxVisits > 0:
		err = s.visit(ctx, l)
	}
	if err != nil {
		return nil, err
	}
	if !o.Peek {
		s.clicks.add(code)
		if s.analytics != nil {
			s.analytics.add(s.newClick(l, o.Request, o.ClientIP))
		}
	}
	return l, nil
}

// find looks code up; a string that cannot be a code is not looked up.
func (s *Service) find(ctx context.Context, code string) (*Link, error) {
	if !s.validKey(code) {
		return nil, ErrNotFound
	}
	return s.lookup(ctx, code)
}

// Delete removes a link; it stops resolving at once in this process and in
// Redis, and within LocalTTL in other processes.
func (s *Service) Delete(ctx context.Context, code string) error {
	ctx, call := s.obs.del.Start(ctx)
	return call.End(s.deleteLink(ctx, code, false, ""))
}

func (s *Service) deleteLink(ctx context.Context, code string, owned bool, owner string) error {
	if !s.validKey(code) {
		return ErrNotFound
	}
	r, err := s.remove(ctx, code, owned, owner)
	if err != nil {
		return err
	}
	l := s.linkOf(r)
	s.unindexLink(ctx, l, indexTags(l))
	s.clicks.drop(code)
	if s.analytics != nil {
		s.analytics.drop(code)
	}
	return s.forget(ctx, code)
}

// Stats are a link's counters.
type Stats struct {
	Code   string `json:"code"`
	Domain string `json:"domain,omitempty"` // "" for the default domain
	Clicks int64  `json:"clicks"`           // flushed to SQL plus counted here, not yet flushed
}

// Stats returns the click count of code.
func (s *Service) Stats(ctx context.Context, code string) (Stats, error) {
	ctx, call := s.obs.stats.Start(ctx)
	st, err := s.linkStats(ctx, code, false, "")
	return st, call.End(err)
}

func (s *Service) linkStats(ctx context.Context, code string, owned bool, owner string) (Stats, error) {
	if !s.validKey(code) {
		return Stats{}, ErrNotFound
	}
	n, err := s.storedClicks(ctx, code, owned, owner)
	if err != nil {
		return Stats{}, err
	}
	c, domain := s.split(code)
	return Stats{Code: c, Domain: domain, Clicks: n + s.clicks.pending(code)}, nil
}
