package feed

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

// instruments are the Service's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	block *obs.Block
	publish, delete, post, timeline, follow, unfollow, blockOp,
	followees, followersOp, followerCount, repair, seedFollows,
	relayFanout, handleChunk, push, activate,
	authorPosts, unblock, mute, unmute, setMarker, marker, unreadSince *obs.Op
	lookups metric.Int64Counter
	delay   metric.Float64Histogram
	// lookup options by layer and result
	localHit, localMiss, redisHit, redisMiss, sqlHit, sqlMiss metric.AddOption
}

// reasons are the refusals, as the metrics name them.
var reasons = []obs.Reason{
	{Err: ErrInvalid, Name: "invalid"},
	{Err: ErrCursor, Name: "cursor"},
	{Err: ErrNotFound, Name: "not_found"},
	{Err: ErrBlocked, Name: "blocked"},
	{Err: outbox.ErrPoison, Name: "poison"}, // ErrBadMessage is always marked poison
}

var classify = obs.Refuse(reasons...)

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("feed", mp, tp)
	names := obs.Names(reasons)
	op := func(name string) *obs.Op { return b.Op(name, classify, names...) }
	in := &instruments{block: b,
		publish: op("publish"), delete: op("delete"), post: op("post"), timeline: op("timeline"),
		follow: op("follow"), unfollow: op("unfollow"), blockOp: op("block"),
		followees: op("followees"), followersOp: op("followers"), followerCount: op("follower_count"),
		repair: op("repair"), seedFollows: op("seed_follows"),
		relayFanout: op("relay_fanout"), handleChunk: op("handle_chunk"), push: op("push"), activate: op("activate"),
		authorPosts: op("author_posts"), unblock: op("unblock"), mute: op("mute"), unmute: op("unmute"),
		setMarker: op("set_marker"), marker: op("marker"), unreadSince: op("unread_since"),
	}
	m := b.Meter()
	var err error
	in.lookups, err = m.Int64Counter("casebook.feed.post.lookups", metric.WithUnit("{post}"),
		metric.WithDescription("Posts looked up while hydrating, by cache layer (local, redis, sql) and result (hit, miss); a miss goes to the next layer, an SQL miss is a post that does not exist."))
	obs.Handle(err)
	in.delay, err = m.Float64Histogram("casebook.feed.fanout.delay", metric.WithUnit("s"),
		metric.WithDescription("From a post's creation to one of its fan-out chunks pushed into inboxes: the largest per post is its delay to the last inbox."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	obs.Handle(err)
	lookup := func(layer, result string) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("casebook.cache.layer", layer), attribute.String("casebook.cache.result", result)))
	}
	in.localHit, in.localMiss = lookup("local", "hit"), lookup("local", "miss")
	in.redisHit, in.redisMiss = lookup("redis", "hit"), lookup("redis", "miss")
	in.sqlHit, in.sqlMiss = lookup("sql", "hit"), lookup("sql", "miss")
	return in
}

// looked counts n lookups with opt, when metrics are wanted.
func (in *instruments) looked(ctx context.Context, n int, opt metric.AddOption) {
	if n > 0 && in.block.Metering() {
		in.lookups.Add(ctx, int64(n), opt)
	}
}
