package feed

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/shard"
)

var (
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("feed: bad config")
	// ErrInvalid is wrapped by errors about bad input; nothing was written.
	ErrInvalid = errors.New("feed: invalid input")
	// ErrCursor is returned for a cursor Timeline did not make.
	ErrCursor = errors.New("feed: malformed cursor")
	// ErrNotFound is returned for a post that does not exist (or is not
	// the caller's to delete).
	ErrNotFound = errors.New("feed: no such post")
	// ErrBlocked is returned by Follow when either user blocked the other.
	ErrBlocked = errors.New("feed: blocked")
	// ErrBadMessage is a fan-out message that can never be applied; it is
	// marked outbox.ErrPoison.
	ErrBadMessage = errors.New("feed: bad fan-out message")
)

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	// Namespace prefixes every Redis key.
	Namespace string
	// TablesPerDB is how many tables each database holds per logical table
	// [8]; the total must be a power of two ≤ 65,536.
	TablesPerDB int
	// InboxCap is how many post ids a reader's inbox keeps [2000]. Older
	// entries are trimmed once the inbox holds InboxCap+InboxSlack, so a
	// push costs one ZADD and one ZCARD, and a trim runs once per Slack
	// pushes.
	InboxCap int
	// InboxSlack is how far an inbox may grow past InboxCap before it is
	// trimmed [InboxCap/10].
	InboxSlack int
	// OutboxCap is how many recent post ids each author's outbox keeps
	// [InboxCap]; older posts are found in SQL only.
	OutboxCap int
	// ChunkSize is how many followers one fan-out message carries [500].
	ChunkSize int
	// ActivePeriod is how long a reader stays "active" after a read [7 days]:
	// an inbox exists only for active readers (its TTL), and fan-out skips
	// everyone else. A reader who comes back gets an inbox rebuilt from the
	// outboxes of the accounts they follow.
	ActivePeriod time.Duration
	// CelebrityThreshold, when set, overrides the derived threshold: authors
	// with at least this many followers are pulled at read time.
	CelebrityThreshold int64
	// ReadsPerDay is a typical reader's timeline reads per day [10], and
	// PullCostRatio what one pull (an outbox read at timeline time) costs
	// against one push (an inbox write) [2]. See Threshold.
	ReadsPerDay   float64
	PullCostRatio float64
	// PushRate is how many inbox writes per second the fan-out consumers
	// sustain together [200,000], and MaxFanoutDelay the longest a pushed
	// post may take to reach every inbox [5s]. See Threshold.
	PushRate       float64
	MaxFanoutDelay time.Duration
	// PullFloor is the fewest followers an author is pulled for because of
	// a high posting rate [10,000]: below it a push is cheap whatever the
	// rates, and every pulled author adds a read to each follower's page.
	PullFloor int64
	// RegistryRefresh is how often each Service reloads the celebrity
	// registry from SQL [1s]. A new celebrity's posts are still pushed for
	// 2×RegistryRefresh, so no reader misses one while its process learns.
	RegistryRefresh time.Duration
	// LocalTTL is how long this process keeps a post in memory [1s]; 0
	// disables the local cache. A delete made by another process can show
	// here for at most LocalTTL.
	LocalTTL time.Duration
	// LocalCost bounds the local cache, in posts [100,000]. Beside the posts
	// the process keeps, for LocalTTL too, the newest ids of up to 10,000
	// pulled celebrities' outboxes, each checked against the outbox's
	// version at every read, and readers' followees and mutes (up to
	// 1,000,000 names in all), checked by a token every change drops (see
	// Timeline).
	LocalCost int64
	// CacheTTL is how long Redis keeps a post [1h]; NegativeTTL how long a
	// missing post is remembered [1m].
	CacheTTL    time.Duration
	NegativeTTL time.Duration
	// MaxBody is the largest post body in bytes [4096].
	MaxBody int
	// RepairGrace is how old an unfinished follow or unfollow must be before
	// Repair finishes it [1m], so Repair never races a live call.
	RepairGrace time.Duration
	// Now is the clock [time.Now].
	Now func() time.Time
	// CursorKey, when set (at least 16 bytes, the same secret on every
	// process of a deployment), authenticates Timeline's and AuthorPosts'
	// cursors: each carries a MAC over its position and its reader (or
	// author's page), and any cursor not made for that reader (or page)
	// with that key is ErrCursor.
	// Without it a cursor is a position, not a secret: a well-formed one
	// Timeline never made reads the reader's own timeline from there (it
	// shows nothing the reader could not page to). Setting or changing the
	// key makes the cursors given out before ErrCursor; clients start again
	// from the top.
	CursorKey []byte

	// MeterProvider and TracerProvider receive the Service's metrics and
	// spans (doc.go, Observability). Default the global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Service is a news feed over one Redis (or Redis Cluster) and sharded SQL.
// It is safe for concurrent use.
type Service struct {
	rdb   redis.UniversalClient
	dbs   []*sqlx.DB
	cfg   Config
	posts *shard.Router // posts by the author's gene
	users *shard.Router // follows by follower, followers by followee, blocks by blocker
	genes idgen.Genes
	space keys.Space
	idSrc *idgen.SQLSource

	local *ristretto.Cache[int64, *Post]
	pulls *kept[pulled]   // nil when LocalTTL is 0
	views *kept[keptView] // nil when LocalTTL is 0
	// readsPrimaries: read-only commands reach the primaries (not a
	// cluster client routing reads to replicas), so a page may be read
	// without read.lua (readKept).
	readsPrimaries bool
	flight         singleflight.Group

	ids       *gene.IDs
	closeOnce sync.Once

	reg     registry
	wg      sync.WaitGroup
	cursors cursors
	obs     *instruments
}

// New returns a Service over dbs (all "mysql" or all "sqlite"). Call
// Migrate once before use.
func New(rdb redis.UniversalClient, dbs []*sqlx.DB, cfg Config) (*Service, error) {
	cfg.TablesPerDB = cmp.Or(cfg.TablesPerDB, 8)
	cfg.InboxCap = cmp.Or(cfg.InboxCap, 2000)
	cfg.InboxSlack = cmp.Or(cfg.InboxSlack, max(1, cfg.InboxCap/10))
	cfg.OutboxCap = cmp.Or(cfg.OutboxCap, cfg.InboxCap)
	cfg.ChunkSize = cmp.Or(cfg.ChunkSize, 500)
	cfg.ActivePeriod = cmp.Or(cfg.ActivePeriod, 7*24*time.Hour)
	cfg.ReadsPerDay = cmp.Or(cfg.ReadsPerDay, 10)
	cfg.PullCostRatio = cmp.Or(cfg.PullCostRatio, 2)
	cfg.PushRate = cmp.Or(cfg.PushRate, 200_000)
	cfg.MaxFanoutDelay = cmp.Or(cfg.MaxFanoutDelay, 5*time.Second)
	cfg.PullFloor = cmp.Or(cfg.PullFloor, 10_000)
	cfg.RegistryRefresh = cmp.Or(cfg.RegistryRefresh, time.Second)
	cfg.LocalTTL = cmp.Or(cfg.LocalTTL, time.Second)
	cfg.LocalCost = cmp.Or(cfg.LocalCost, 100_000)
	cfg.CacheTTL = cmp.Or(cfg.CacheTTL, time.Hour)
	cfg.NegativeTTL = cmp.Or(cfg.NegativeTTL, time.Minute)
	cfg.MaxBody = cmp.Or(cfg.MaxBody, 4096)
	cfg.RepairGrace = cmp.Or(cfg.RepairGrace, time.Minute)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if rdb == nil || len(dbs) == 0 {
		return nil, fmt.Errorf("%w: a Redis client and at least one database are required", ErrConfig)
	}
	if err := gene.CheckDatabases(dbs, cfg.TablesPerDB, "feed"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case cfg.InboxCap < 1 || cfg.InboxSlack < 1 || cfg.OutboxCap < 1 || cfg.ChunkSize < 1 || cfg.ChunkSize > 10_000:
		return nil, fmt.Errorf("%w: inbox cap %d, slack %d, outbox cap %d, chunk %d", ErrConfig, cfg.InboxCap, cfg.InboxSlack, cfg.OutboxCap, cfg.ChunkSize)
	case cfg.ActivePeriod < time.Second || cfg.RegistryRefresh < time.Millisecond || cfg.MaxFanoutDelay <= 0:
		return nil, fmt.Errorf("%w: active period %v, registry refresh %v, max delay %v", ErrConfig, cfg.ActivePeriod, cfg.RegistryRefresh, cfg.MaxFanoutDelay)
	case cfg.CelebrityThreshold < 0 || cfg.PullFloor < 1 || !(cfg.ReadsPerDay > 0) || !(cfg.PullCostRatio > 0) || !(cfg.PushRate > 0) || math.IsInf(cfg.PushRate, 0):
		return nil, fmt.Errorf("%w: threshold %d, floor %d, reads/day %g, pull cost %g, push rate %g", ErrConfig, cfg.CelebrityThreshold, cfg.PullFloor, cfg.ReadsPerDay, cfg.PullCostRatio, cfg.PushRate)
	case cfg.LocalTTL < 0 || cfg.LocalCost < 1 || cfg.CacheTTL < time.Second || cfg.NegativeTTL < time.Millisecond || cfg.MaxBody < 1 || cfg.RepairGrace < 0:
		return nil, fmt.Errorf("%w: local TTL %v, local cost %d, cache TTL %v, negative TTL %v, max body %d, repair grace %v", ErrConfig, cfg.LocalTTL, cfg.LocalCost, cfg.CacheTTL, cfg.NegativeTTL, cfg.MaxBody, cfg.RepairGrace)
	}
	if cfg.CursorKey != nil && len(cfg.CursorKey) < 16 {
		return nil, fmt.Errorf("%w: a cursor key of %d bytes (at least 16)", ErrConfig, len(cfg.CursorKey))
	}
	posts, err := shard.New(dbs, shard.Config{Table: "feed_posts", TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	users, err := shard.New(dbs, shard.Config{Table: "feed_follows", TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	idSrc, err := idgen.NewSQLSource(dbs[0], "feed_ids")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s := &Service{rdb: rdb, dbs: dbs, cfg: cfg, posts: posts, users: users, genes: gene.Genes,
		space: keys.NewSpace(keys.Join(cfg.Namespace, "feed")), idSrc: idSrc, ids: gene.NewIDs(idSrc, "post", 1000),
		cursors: cursors{key: bytes.Clone(cfg.CursorKey)}, obs: newInstruments(cfg.MeterProvider, cfg.TracerProvider)}
	if cfg.LocalTTL > 0 {
		s.local, err = ristretto.NewCache(&ristretto.Config[int64, *Post]{NumCounters: 10 * cfg.LocalCost, MaxCost: cfg.LocalCost, BufferItems: 64})
		if err != nil {
			return nil, fmt.Errorf("%w: local cache: %w", ErrConfig, err)
		}
		s.pulls, s.views = newPulls(cfg.LocalTTL), newViews(cfg.LocalTTL)
	}
	s.readsPrimaries = true
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		o := cc.Options()
		s.readsPrimaries = !o.ReadOnly && !o.RouteByLatency && !o.RouteRandomly
	}
	return s, nil
}

// Close stops the id lease, the registry refresh and the local cache; safe
// to call twice.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.ids.Close()
		s.wg.Wait()
		if s.local != nil {
			s.local.Close()
		}
	})
	return nil
}

// newID returns a post id carrying author's gene, from an SQL-leased
// segment: it never repeats whatever Redis forgets.
func (s *Service) newID(ctx context.Context, author string) (int64, error) {
	id, err := s.ids.Next(ctx, s.genes.Of(author))
	if err != nil {
		return 0, fmt.Errorf("feed: %w", err)
	}
	return id, nil
}

func (s *Service) shardOfUser(user string) shard.Shard { return s.users.ByGene(s.genes.Of(user)) }
func (s *Service) shardOfPost(id int64) shard.Shard    { return s.posts.ByGene(s.genes.Gene(id)) }

// A user's keys share the tag "u:<user>": inbox (sorted set of post ids
// scored by time, with a state marker), following (set of followees, a
// cache of SQL, with a marker), muted (set of muted authors, alike), gen
// (bumped by every follow, unfollow, mute and unmute), outbox (the user's
// own recent posts), followers (the cached count) and marker (the read
// marker, "score:id").
func (s *Service) userKey(user, part string) string { return s.space.Key("u:"+user, part) }

// postKey is a post's cache entry, tagged by the post.
func (s *Service) postKey(id int64) string { return s.space.Key("p:" + strconv.FormatInt(id, 10)) }

func validUser(user string) error {
	if err := gene.ValidID(user); err != nil {
		return fmt.Errorf("%w: user %w", ErrInvalid, err)
	}
	if user == marker {
		return fmt.Errorf("%w: user id %q is reserved", ErrInvalid, user)
	}
	return nil
}

func (s *Service) nowMs() int64 { return s.cfg.Now().UnixMilli() }
