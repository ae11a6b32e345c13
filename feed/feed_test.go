package feed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/kafka"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	t   *testing.T
	s   *feed.Service
	r   *testenv.Redis
	clk *testenv.Clock
	ctx context.Context
	dbs []*sqlx.DB
	cfg feed.Config
}

func newFixture(t *testing.T, r *testenv.Redis, cfg feed.Config) *fixture {
	t.Helper()
	clk := testenv.NewClock(testenv.Now().UTC().Truncate(time.Hour))
	cfg.Namespace, cfg.Now, cfg.TablesPerDB = r.Namespace, clk.Now, 2
	cfg.RegistryRefresh = time.Millisecond
	dbs := testenv.NewSQLs(t, 2)
	s, err := feed.New(r.Client, dbs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, s: s, r: r, clk: clk, ctx: ctx, dbs: dbs, cfg: cfg}
}

// twin is a second app server on the same databases, clock and namespace,
// talking to Redis through rdb.
func (f *fixture) twin(rdb redis.UniversalClient) *feed.Service {
	f.t.Helper()
	s, err := feed.New(rdb, f.dbs, f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { s.Close() })
	return s
}

// fanout relays waiting posts and applies every chunk directly.
func (f *fixture) fanout() int {
	f.t.Helper()
	pub := &testenv.Published{}
	if _, err := f.s.RelayFanout(f.ctx, pub, "chunks", 100); err != nil {
		f.t.Fatal(err)
	}
	for _, m := range pub.Msgs {
		if err := f.s.HandleChunk(f.ctx, m.Key, m.Value); err != nil {
			f.t.Fatal(err)
		}
	}
	return len(pub.Msgs)
}

func (f *fixture) follow(a, b string) {
	f.t.Helper()
	if err := f.s.Follow(f.ctx, a, b); err != nil {
		f.t.Fatalf("%s follows %s: %v", a, b, err)
	}
}

func (f *fixture) post(author, body string) feed.Post {
	f.t.Helper()
	f.clk.Add(time.Millisecond)
	p, err := f.s.Publish(f.ctx, feed.PublishRequest{Author: author, RequestID: body, Body: body})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// timeline reads reader's whole timeline in pages of size.
func (f *fixture) timeline(reader string, size int) []int64 {
	f.t.Helper()
	var ids []int64
	cursor := ""
	for range 1000 {
		p, err := f.s.Timeline(f.ctx, reader, cursor, size)
		if err != nil {
			f.t.Fatalf("timeline of %s: %v", reader, err)
		}
		for _, post := range p.Posts {
			ids = append(ids, post.ID)
		}
		if p.Next == "" {
			return ids
		}
		cursor = p.Next
	}
	f.t.Fatal("timeline does not end")
	return nil
}

// model is what a timeline must show: live posts by current followees
// the reader has not muted, newest first.
type model struct {
	follows map[string]map[string]bool
	mutes   map[string]map[string]bool
	blocks  map[string]map[string]bool
	posts   []feed.Post
	deleted map[int64]bool
}

func newModel() *model {
	return &model{follows: map[string]map[string]bool{}, mutes: map[string]map[string]bool{},
		blocks: map[string]map[string]bool{}, deleted: map[int64]bool{}}
}

func set(m map[string]map[string]bool, a, b string, v bool) {
	if m[a] == nil {
		m[a] = map[string]bool{}
	}
	if v {
		m[a][b] = true
	} else {
		delete(m[a], b)
	}
}

func (m *model) follow(a, b string) { set(m.follows, a, b, true) }

// tryFollow is Follow: refused (false) when either blocked the other.
func (m *model) tryFollow(a, b string) bool {
	if m.blocks[a][b] || m.blocks[b][a] {
		return false
	}
	m.follow(a, b)
	return true
}

// block is Block: recorded, and the follows both ways removed.
func (m *model) block(a, b string) {
	set(m.blocks, a, b, true)
	set(m.follows, a, b, false)
	set(m.follows, b, a, false)
}

func (m *model) timeline(reader string) []int64 {
	return m.sorted(func(p feed.Post) bool { return m.follows[reader][p.Author] && !m.mutes[reader][p.Author] })
}

// authorPosts is an author's profile: every live post of theirs.
func (m *model) authorPosts(author string) []int64 {
	return m.sorted(func(p feed.Post) bool { return p.Author == author })
}

// sorted returns the live posts keep selects in timeline order.
func (m *model) sorted(keep func(feed.Post) bool) []int64 {
	var ps []feed.Post
	for _, p := range m.posts {
		if keep(p) && !m.deleted[p.ID] {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b feed.Post) int {
		if a.Score != b.Score {
			return int(b.Score - a.Score)
		}
		x, y := strconv.FormatInt(a.ID, 10), strconv.FormatInt(b.ID, 10)
		if len(x) != len(y) {
			return len(y) - len(x)
		}
		if x > y {
			return -1
		}
		return 1
	})
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// TestTimelinesMatchModel: push (ordinary authors), pull (celebrities) and
// hybrid (readers following both), on one Redis and on the cluster, with
// readers active before the posts (pushed) and readers who come back
// (inboxes rebuilt).
func TestTimelinesMatchModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, feed.Config{CelebrityThreshold: 6, InboxCap: 40, InboxSlack: 5})
		m := newModel()
		rng := rand.New(rand.NewPCG(7, 9))
		users := make([]string, 16)
		for i := range users {
			users[i] = "u" + strconv.Itoa(i)
		}
		// u0 and u1 are followed by everyone: celebrities.
		for _, u := range users {
			for _, c := range users[:2] {
				if u != c {
					f.follow(u, c)
					m.follow(u, c)
				}
			}
		}
		for range 30 {
			a, b := users[2+rng.IntN(14)], users[2+rng.IntN(14)]
			if a != b {
				f.follow(a, b)
				m.follow(a, b)
			}
		}
		active := users[:10] // these read before the posts; the rest come back later
		for _, u := range active {
			f.timeline(u, 5)
		}
		for i := range 120 {
			author := users[rng.IntN(len(users))]
			m.posts = append(m.posts, f.post(author, fmt.Sprintf("p%d", i)))
		}
		f.fanout()
		for _, u := range users {
			got, want := f.timeline(u, 7), m.timeline(u)
			if len(want) > 40 && !slices.Equal(got[:40], want[:40]) || len(want) <= 40 && !slices.Equal(got, want) {
				t.Fatalf("timeline of %s:\n got %v\nwant %v", u, got, want)
			}
		}
	})
}

// TestFanoutThroughKafka: chunks travel through Kafka; a consumer that
// fails after applying a chunk (as if killed before its offset commit) and
// a second group that reads every chunk again leave no entry lost or
// duplicated.
func TestFanoutThroughKafka(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{ChunkSize: 3})
	m := newModel()
	readers := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, r := range readers {
		f.follow(r, "star")
		m.follow(r, "star")
		f.timeline(r, 10)
	}
	for i := range 5 {
		m.posts = append(m.posts, f.post("star", "k"+strconv.Itoa(i)))
	}
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, 3)
	pub, err := kafka.Dial(brokers, "feed-test")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if n, err := f.s.RelayFanout(f.ctx, pub, topic, 100); err != nil || n != 5 {
		t.Fatalf("relayed %d posts: %v", n, err)
	}
	const chunks = 5 * 3 // 7 followers in chunks of 3
	var mu sync.Mutex
	failed := map[string]bool{}
	crashy := func(ctx context.Context, k, v []byte) error {
		if err := f.s.HandleChunk(ctx, k, v); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !failed[string(k)] {
			failed[string(k)] = true
			return errors.New("killed before commit")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	for _, group := range []string{"g1-" + topic, "g2-" + topic} {
		c, err := kafka.ConsumeN(ctx, brokers, group, []string{topic}, chunks, crashy, kafka.ConsumerConfig{RetryBackoff: time.Millisecond})
		if err != nil || c.Handled() != chunks {
			t.Fatalf("%s handled %d of %d: %v", group, c.Handled(), chunks, err)
		}
		clear(failed)
	}
	for _, r := range readers {
		if got, want := f.timeline(r, 2), m.timeline(r); !slices.Equal(got, want) {
			t.Fatalf("timeline of %s: got %v, want %v", r, got, want)
		}
		if n, err := f.r.Client.ZCard(f.ctx, f.inbox(r)).Result(); err != nil || n != 5+1 {
			t.Fatalf("inbox of %s holds %d entries and the marker, want 5: %v", r, n-1, err)
		}
	}
}

func (f *fixture) inbox(user string) string {
	return keys.NewSpace(keys.Join(f.r.Namespace, "feed")).Key("u:"+user, "inbox")
}

func (f *fixture) pushed(user string) string {
	return keys.NewSpace(keys.Join(f.r.Namespace, "feed")).Key("u:"+user, "pushed")
}
