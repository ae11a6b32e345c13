package feed_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
)

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

func benchService(b *testing.B, r *testenv.Redis, cfg feed.Config) *feed.Service {
	b.Helper()
	cfg.Namespace = r.Namespace
	cfg.TablesPerDB = cmpOr(cfg.TablesPerDB, 4)
	s, err := feed.New(r.Client, testenv.NewSQLs(b, 1), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// openInboxes makes n readers active (an inbox and a pushed list holding
// only their markers).
func openInboxes(b *testing.B, r *testenv.Redis, s *feed.Service, n int) []string {
	b.Helper()
	ctx := context.Background()
	users := make([]string, n)
	for start := 0; start < n; start += 5000 {
		pipe := r.Client.Pipeline()
		for i := start; i < min(n, start+5000); i++ {
			users[i] = "f" + strconv.Itoa(i)
			pipe.ZAdd(ctx, s.InboxKey(users[i]), redisZ(0, "~"))
			pipe.RPush(ctx, s.PushedKey(users[i]), "~")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return users
}

// BenchmarkFanout applies chunks of 500 followers (HandleChunk's path: the
// post read from the process cache, one pipeline of RPUSHX to the readers'
// pushed lists) and, interleaved in the same run, a raw
// pipelined ZADD of the same ids into as many keys; it reports both rates
// and their ratio.
func BenchmarkFanout(b *testing.B) {
	r := testenv.NewRedis(b)
	s := benchService(b, r, feed.Config{})
	ctx := context.Background()
	users := openInboxes(b, r, s, 5000)
	raw := make([]string, len(users))
	for i, u := range users {
		raw[i] = r.Namespace + ":raw:" + u
	}
	// Chunks of 64 real posts in turn: Push reads each chunk's post (the
	// process cache holds them) for its score.
	posts := make([]feed.Post, 64)
	for i := range posts {
		p, err := s.Publish(ctx, feed.PublishRequest{Author: "a", RequestID: strconv.Itoa(i), Body: "x"})
		if err != nil {
			b.Fatal(err)
		}
		posts[i] = p
	}
	var pushT, rawT time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		lo := (i * 500) % len(users)
		post := posts[i%len(posts)]
		score := post.Score
		start := testenv.Now()
		pipe := r.Client.Pipeline()
		for _, k := range raw[lo : lo+500] {
			pipe.ZAdd(ctx, k, redisZ(float64(score), strconv.FormatInt(post.ID, 10)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		mid := testenv.Now()
		if n, err := s.Push(ctx, feed.Chunk{V: 1, Post: post.ID, Author: "a", Score: score, Followers: users[lo : lo+500]}); err != nil || n != 500 {
			b.Fatalf("pushed %d: %v", n, err)
		}
		pushT += testenv.Since(mid)
		rawT += mid.Sub(start)
	}
	writes := float64(b.N * 500)
	b.ReportMetric(writes/pushT.Seconds(), "inbox-writes/s")
	b.ReportMetric(writes/rawT.Seconds(), "raw-zadd/s")
	b.ReportMetric(100*rawT.Seconds()/pushT.Seconds(), "%-of-raw")
}

// BenchmarkTimeline reads the first 20-post page of a reader whose inbox
// holds 2,000 posts and who follows 20 celebrities with 100 posts each
// (pulled and merged), on one Redis and on the Redis Cluster, and reports
// p50 and p99 latency.
func BenchmarkTimeline(b *testing.B) {
	b.Run("redis=single", func(b *testing.B) { benchTimeline(b, testenv.NewRedis(b)) })
	b.Run("redis=cluster", func(b *testing.B) { benchTimeline(b, testenv.NewRedisCluster(b)) })
}

func benchTimeline(b *testing.B, r *testenv.Redis) {
	s, reader := seedTimeline(b, r)
	ctx := context.Background()
	mem, _ := r.Client.MemoryUsage(ctx, s.InboxKey(reader)).Result()
	n, _ := r.Client.ZCard(ctx, s.InboxKey(reader)).Result()
	testenv.Latencies(b, func() error {
		p, err := s.Timeline(ctx, reader, "", 20)
		if err == nil && len(p.Posts) != 20 {
			err = fmt.Errorf("%d posts", len(p.Posts))
		}
		return err
	})
	b.ReportMetric(float64(mem)/float64(n), "inbox-B/entry")
}

// BenchmarkUnreadSince counts the unread entries of BenchmarkTimeline's
// reader (2,000 inbox posts, 20 pulled celebrities), the marker at the
// 11th post of their timeline, and reports p50 and p99 latency.
func BenchmarkUnreadSince(b *testing.B) {
	b.Run("redis=single", func(b *testing.B) { benchUnread(b, testenv.NewRedis(b)) })
	b.Run("redis=cluster", func(b *testing.B) { benchUnread(b, testenv.NewRedisCluster(b)) })
}

func benchUnread(b *testing.B, r *testenv.Redis) {
	s, reader := seedTimeline(b, r)
	ctx := context.Background()
	p, err := s.Timeline(ctx, reader, "", 20)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.SetMarker(ctx, reader, p.Posts[10].ID); err != nil {
		b.Fatal(err)
	}
	testenv.Latencies(b, func() error {
		n, err := s.UnreadSince(ctx, reader)
		if err == nil && n != 10 {
			err = fmt.Errorf("%d unread, want 10", n)
		}
		return err
	})
}

// BenchmarkAuthorPosts reads a 20-post page of an author with 500 posts
// and an outbox of 100: the first page (from the outbox, one hydrate) and
// a page past the outbox (one SQL query), on one Redis.
func BenchmarkAuthorPosts(b *testing.B) {
	r := testenv.NewRedis(b)
	s := benchService(b, r, feed.Config{OutboxCap: 100})
	ctx := context.Background()
	for i := range 500 {
		if _, err := s.Publish(ctx, feed.PublishRequest{Author: "author", RequestID: "r" + strconv.Itoa(i), Body: strings.Repeat("x", 140)}); err != nil {
			b.Fatal(err)
		}
	}
	deep := ""
	for range 10 { // past the outbox's 100 posts
		p, err := s.AuthorPosts(ctx, "author", deep, 20)
		if err != nil {
			b.Fatal(err)
		}
		deep = p.Next
	}
	for _, c := range []struct{ name, cursor string }{{"page=outbox", ""}, {"page=sql", deep}} {
		b.Run(c.name, func(b *testing.B) {
			testenv.Latencies(b, func() error {
				p, err := s.AuthorPosts(ctx, "author", c.cursor, 20)
				if err == nil && len(p.Posts) != 20 {
					err = fmt.Errorf("%d posts", len(p.Posts))
				}
				return err
			})
		})
	}
}

// seedTimeline makes BenchmarkTimeline's reader and returns the service and
// the reader, whose inbox is built.
func seedTimeline(b *testing.B, r *testenv.Redis) (*feed.Service, string) {
	s := benchService(b, r, feed.Config{CelebrityThreshold: 1 << 40})
	ctx := context.Background()
	reader := "reader"
	var authors []string
	for i := range 50 {
		authors = append(authors, "a"+strconv.Itoa(i))
	}
	for i := range 20 {
		c := "celeb" + strconv.Itoa(i)
		if err := s.Promote(ctx, c); err != nil {
			b.Fatal(err)
		}
		authors = append(authors, c)
	}
	for _, a := range authors {
		if err := s.Follow(ctx, reader, a); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2000 + 20*100 {
		a := authors[i%50]
		if i >= 2000 {
			a = authors[50+i%20]
		}
		if _, err := s.Publish(ctx, feed.PublishRequest{Author: a, RequestID: "r" + strconv.Itoa(i), Body: strings.Repeat("x", 140)}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Timeline(ctx, reader, "", 20); err != nil { // builds the inbox
		b.Fatal(err)
	}
	if n, _ := r.Client.ZCard(ctx, s.InboxKey(reader)).Result(); n < 2000 {
		b.Fatalf("inbox holds %d", n)
	}
	return s, reader
}

// BenchmarkMillionFollowers publishes one post by an author with 1,000,000
// followers, all active, and reports the seconds until every inbox holds
// it: RelayFanout → Kafka (kfake or CASEBOOK_KAFKA_BROKERS, 8 partitions)
// → one consumer group member running HandleChunk per partition. Run it alone: go test -run X -bench MillionFollowers
// -benchtime 1x ./feed (it seeds 1M SQL rows and 1M inboxes).
func BenchmarkMillionFollowers(b *testing.B) {
	const followers = 1_000_000
	r := testenv.NewRedis(b)
	s := benchService(b, r, feed.Config{CelebrityThreshold: 2 * followers, TablesPerDB: 1})
	ctx := context.Background()
	users := openInboxes(b, r, s, followers)
	db, table := s.FollowersTable("star")
	for start := 0; start < followers; start += 5000 {
		q := strings.Builder{}
		q.WriteString("INSERT INTO " + table + " (followee, follower) VALUES ")
		args := make([]any, 0, 10000)
		for i := start; i < start+5000; i++ {
			if i > start {
				q.WriteByte(',')
			}
			q.WriteString("(?, ?)")
			args = append(args, "star", users[i])
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			b.Fatal(err)
		}
	}
	brokers := testenv.Kafka(b)
	topic := testenv.Topic(b, 8)
	pub, err := kafka.Dial(brokers, "feed-bench")
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	b.ResetTimer()
	for i := range b.N {
		start := testenv.Now()
		p, err := s.Publish(ctx, feed.PublishRequest{Author: "star", RequestID: "big" + strconv.Itoa(i), Body: "hello, world"})
		if err != nil {
			b.Fatal(err)
		}
		if n, err := s.RelayFanout(ctx, pub, topic, 10); err != nil || n != 1 {
			b.Fatalf("relayed %d: %v", n, err)
		}
		relayed := testenv.Since(start)
		var first sync.Once
		var joined time.Duration // until the group's first chunk: relay + group join + first fetch
		handle := func(ctx context.Context, k, v []byte) error {
			first.Do(func() { joined = testenv.Since(start) })
			return s.HandleChunk(ctx, k, v)
		}
		c, err := kafka.ConsumeN(ctx, brokers, "g"+strconv.Itoa(i)+topic, []string{topic}, followers/500, handle, kafka.ConsumerConfig{})
		if err != nil || c.Handled() != followers/500 {
			b.Fatalf("handled %d chunks: %v", c.Handled(), err)
		}
		delivered := testenv.Since(start) // the check below is not delivery
		// every inbox holds the post (in its pushed list, which the next
		// read moves into the sorted set)
		item := strconv.FormatInt(p.Score, 10) + ":" + strconv.FormatInt(p.ID, 10)
		for lo := 0; lo < followers; lo += 10000 {
			pipe := r.Client.Pipeline()
			for _, u := range users[lo : lo+10000] {
				pipe.LPos(ctx, s.PushedKey(u), item, redis.LPosArgs{})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatalf("an inbox lacks the post: %v", err)
			}
		}
		b.ReportMetric(delivered.Seconds(), "s-to-all-inboxes")
		b.ReportMetric(testenv.Since(start).Seconds(), "s-incl-check")
		b.ReportMetric(relayed.Seconds(), "s-relay")
		b.ReportMetric(joined.Seconds(), "s-to-first-chunk")
	}
}
