package feed_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// openInboxes makes n readers "f0"… active with Activate and returns them.
func openInboxes(b *testing.B, s *feed.Service, n int) []string {
	b.Helper()
	users := make([]string, n)
	for i := range users {
		users[i] = "f" + strconv.Itoa(i)
	}
	if k, err := s.Activate(context.Background(), users...); err != nil || k != n {
		b.Fatalf("activated %d of %d: %v", k, n, err)
	}
	return users
}

// BenchmarkActivate activates 1,000 new readers per iteration, on one Redis
// and on the Redis Cluster, and reports the cost per reader and the Redis
// memory an activated reader holds (its empty inbox and pushed list).
func BenchmarkActivate(b *testing.B) {
	b.Run("redis=single", func(b *testing.B) { benchActivate(b, testenv.NewRedis(b)) })
	b.Run("redis=cluster", func(b *testing.B) { benchActivate(b, testenv.NewRedisCluster(b)) })
}

func benchActivate(b *testing.B, r *testenv.Redis) {
	s := benchService(b, r, feed.Config{})
	ctx := context.Background()
	batch := make([]string, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range batch {
			batch[j] = "r" + strconv.Itoa(i*len(batch)+j)
		}
		if n, err := s.Activate(ctx, batch...); err != nil || n != len(batch) {
			b.Fatalf("activated %d: %v", n, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/reader")
	in, _ := r.Client.MemoryUsage(ctx, s.InboxKey(batch[0])).Result()
	pu, _ := r.Client.MemoryUsage(ctx, s.PushedKey(batch[0])).Result()
	b.ReportMetric(float64(in+pu), "B/reader")
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
	users := openInboxes(b, s, 5000)
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

// BenchmarkFanoutFollowers is BenchmarkMillionFollowers at a CI-friendly
// size: CASEBOOK_FEED_FOLLOWERS followers [100,000].
func BenchmarkFanoutFollowers(b *testing.B) {
	n := 100_000
	if v := os.Getenv("CASEBOOK_FEED_FOLLOWERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("CASEBOOK_FEED_FOLLOWERS=%q: want a positive number", v)
		}
	}
	benchFollowers(b, n)
}

// BenchmarkMillionFollowers publishes one post by an author with 1,000,000
// followers, all active, and reports the seconds until every inbox holds
// it: RelayFanout → Kafka (kfake or CASEBOOK_KAFKA_BROKERS, 8 partitions)
// → one consumer group member running HandleChunk per partition, started
// with the publish (consumers of a service are already running). Run it
// alone: go test -run '^$' -bench MillionFollowers -benchtime 1x ./feed (it
// seeds 1M SQL rows and 1M active readers, deleted at cleanup).
func BenchmarkMillionFollowers(b *testing.B) { benchFollowers(b, 1_000_000) }

// benchFollowers is the fan-out of one post to n active followers. Besides
// the delivery times it reports the Redis server's CPU time during the
// delivery, the setup (s-activate: Activate of the n readers; s-seed-sql:
// the followee-side rows) and Redis memory: used_memory per activated
// reader; per pushed entry from used_memory and from MEMORY USAGE of 1,000
// readers' pushed lists before and after the post; and per inbox entry,
// MEMORY USAGE of those readers' inboxes after a read moved the push in (a
// one-entry sorted set; BenchmarkTimeline's inbox-B/entry is a large one).
func benchFollowers(b *testing.B, followers int) {
	r := testenv.NewRedis(b)
	r.NeedsServer(b, "INFO memory and cpu")
	const chunk = 500
	s := benchService(b, r, feed.Config{CelebrityThreshold: int64(2 * followers), TablesPerDB: 1, ChunkSize: chunk})
	ctx := context.Background()
	mem0 := usedMemory(b, r)
	start := testenv.Now()
	users := openInboxes(b, s, followers)
	activated := testenv.Since(start)
	mem1 := usedMemory(b, r)
	start = testenv.Now()
	db, table := s.FollowersTable("star")
	for lo := 0; lo < followers; lo += 5000 {
		q := strings.Builder{}
		q.WriteString("INSERT INTO " + table + " (followee, follower) VALUES ")
		args := make([]any, 0, 10000)
		for i := lo; i < min(followers, lo+5000); i++ {
			if i > lo {
				q.WriteByte(',')
			}
			q.WriteString("(?, ?)")
			args = append(args, "star", users[i])
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			b.Fatal(err)
		}
	}
	seeded := testenv.Since(start)
	sample := users[:min(len(users), 1000)]
	brokers := testenv.Kafka(b)
	topic := testenv.Topic(b, 8)
	pub, err := kafka.Dial(brokers, "feed-bench")
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		memBefore, pushedBefore := usedMemory(b, r), memoryUsage(b, r, s.PushedKey, sample)
		inboxBefore := memoryUsage(b, r, s.InboxKey, sample)
		cpuBefore := redisCPU(b, r)
		b.StartTimer()
		// The consumers start with the publish, as in a service where they
		// are already running: the group joins while the relay reads the
		// first followers, and chunks are pushed while later ones are relayed.
		start := testenv.Now()
		var first sync.Once
		var joined time.Duration // until the group's first chunk
		chunks := int64((followers + chunk - 1) / chunk)
		var pushed atomic.Int64
		var delivered atomic.Int64 // ns until the last chunk was pushed (not the consumers' shutdown)
		handle := func(ctx context.Context, k, v []byte) error {
			first.Do(func() { joined = testenv.Since(start) })
			err := s.HandleChunk(ctx, k, v)
			if err == nil && pushed.Add(1) == chunks {
				delivered.Store(int64(testenv.Since(start)))
			}
			return err
		}
		consumed := make(chan error, 1)
		go func() {
			c, err := kafka.ConsumeN(ctx, brokers, "g"+strconv.Itoa(i)+topic, []string{topic}, chunks, handle, kafka.ConsumerConfig{})
			if err == nil && c.Handled() != chunks {
				err = fmt.Errorf("handled %d of %d chunks", c.Handled(), chunks)
			}
			consumed <- err
		}()
		p, err := s.Publish(ctx, feed.PublishRequest{Author: "star", RequestID: "big" + strconv.Itoa(i), Body: "hello, world"})
		if err != nil {
			b.Fatal(err)
		}
		if n, err := s.RelayFanout(ctx, pub, topic, 10); err != nil || n != 1 {
			b.Fatalf("relayed %d: %v", n, err)
		}
		relayed := testenv.Since(start)
		if err := <-consumed; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(redisCPU(b, r)-cpuBefore, "redis-cpu-s")
		// every inbox holds the post (in its pushed list, which the next
		// read moves into the sorted set)
		item := strconv.FormatInt(p.Score, 10) + ":" + strconv.FormatInt(p.ID, 10)
		for lo := 0; lo < followers; lo += 10000 {
			pipe := r.Client.Pipeline()
			for _, u := range users[lo:min(followers, lo+10000)] {
				pipe.LPos(ctx, s.PushedKey(u), item, redis.LPosArgs{})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatalf("an inbox lacks the post: %v", err)
			}
		}
		b.ReportMetric(float64(usedMemory(b, r)-memBefore)/float64(followers), "B/pushed-entry")
		b.ReportMetric(float64(memoryUsage(b, r, s.PushedKey, sample)-pushedBefore)/float64(len(sample)), "usage-B/pushed-entry")
		for _, u := range sample { // a read moves the push into the inbox
			if _, err := s.Timeline(ctx, u, "", 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(memoryUsage(b, r, s.InboxKey, sample)-inboxBefore)/float64(len(sample)), "usage-B/inbox-entry")
		b.StartTimer()
		b.ReportMetric(time.Duration(delivered.Load()).Seconds(), "s-to-all-inboxes")
		b.ReportMetric(relayed.Seconds(), "s-relay")
		b.ReportMetric(joined.Seconds(), "s-to-first-chunk")
	}
	b.ReportMetric(activated.Seconds(), "s-activate")
	b.ReportMetric(seeded.Seconds(), "s-seed-sql")
	b.ReportMetric(float64(mem1-mem0)/float64(followers), "B/active-reader")
}

// redisCPU is the CPU time, in seconds, the Redis server has used.
func redisCPU(b *testing.B, r *testenv.Redis) float64 {
	b.Helper()
	info, err := r.Client.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var t float64
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(info["CPU"][k], 64)
		if err != nil {
			b.Fatalf("%s: %v", k, err)
		}
		t += v
	}
	return t
}

// usedMemory is the Redis server's used_memory.
func usedMemory(b *testing.B, r *testenv.Redis) int64 {
	b.Helper()
	info, err := r.Client.InfoMap(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		b.Fatalf("used_memory: %v", err)
	}
	return n
}

// memoryUsage sums MEMORY USAGE of key(u) for every user u.
func memoryUsage(b *testing.B, r *testenv.Redis, key func(string) string, users []string) int64 {
	b.Helper()
	ctx := context.Background()
	pipe := r.Client.Pipeline()
	cmds := make([]*redis.IntCmd, len(users))
	for i, u := range users {
		cmds[i] = pipe.MemoryUsage(ctx, key(u))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n
}
