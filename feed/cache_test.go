package feed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// The post cache between two processes: a write is in Redis at once; a
// delete leaves a tombstone that every process answers from (SQL is not
// asked: here it is made to say otherwise); another process's local copy
// lasts at most LocalTTL; a missing post is remembered as such for
// NegativeTTL.
func TestPostCacheAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	dbs := testenv.NewSQLs(t, 2)
	open := func() *feed.Service {
		s, err := feed.New(r.Client, dbs, feed.Config{Namespace: r.Namespace, TablesPerDB: 2, LocalTTL: 50 * time.Millisecond, NegativeTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := a.Publish(ctx, feed.PublishRequest{Author: "ann", RequestID: "1", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := r.Client.Get(ctx, a.PostKey(p.ID)).Result(); err != nil || raw == "-" {
		t.Fatalf("the new post is not in Redis: %q, %v", raw, err)
	}
	if got, err := b.Post(ctx, p.ID); err != nil || got.Body != "hello" {
		t.Fatalf("the other process reads %+v, %v", got, err)
	}

	if err := a.Delete(ctx, "ann", p.ID); err != nil {
		t.Fatal(err)
	}
	db, table := a.PostsTable(p.ID)
	if _, err := db.ExecContext(ctx, `UPDATE `+table+` SET deleted = 0 WHERE id = ?`, p.ID); err != nil {
		t.Fatal(err) // SQL now says "live": only the tombstone says otherwise
	}
	if _, err := a.Post(ctx, p.ID); !errors.Is(err, feed.ErrNotFound) {
		t.Fatalf("the deleting process reads the post: %v", err)
	}
	time.Sleep(60 * time.Millisecond) // b's local copy expires (LocalTTL 50 ms)
	if _, err := b.Post(ctx, p.ID); !errors.Is(err, feed.ErrNotFound) {
		t.Fatalf("the other process, past LocalTTL, reads the post: %v", err)
	}

	missing := p.ID + 1<<20
	if _, err := b.Post(ctx, missing); !errors.Is(err, feed.ErrNotFound) {
		t.Fatalf("a missing post: %v", err)
	}
	if raw, _ := r.Client.Get(ctx, b.PostKey(missing)).Result(); raw != "-" {
		t.Fatalf("the miss is not remembered in Redis: %q", raw)
	}
	if ttl := r.Client.PTTL(ctx, b.PostKey(missing)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the miss is remembered for %v, want up to NegativeTTL (1m)", ttl)
	}
}
