package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
)

// Every fault of the proxy does what it says to a Redis client, and Heal
// brings the connection back.
func TestProxyFaultsOnRedis(t *testing.T) {
	r, p := testenv.NewFaultyRedis(t)
	c := r.Client
	key := r.Namespace + ":k"
	call := func(timeout time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		begin := testenv.Now()
		err := c.Incr(ctx, key).Err()
		return testenv.Since(begin), err
	}
	if _, err := call(time.Second); err != nil {
		t.Fatal(err)
	}

	p.Latency(150*time.Millisecond, 0)
	if d, err := call(time.Second); err != nil || d < 150*time.Millisecond {
		t.Fatalf("with 150 ms latency: took %v, %v", d, err)
	}
	p.Heal()

	p.Reset()
	if _, err := call(time.Second); err == nil {
		t.Fatal("a call through a resetting proxy succeeded")
	}
	p.Heal()
	resets := p.Resets()
	if resets == 0 {
		t.Fatal("the reset connections were not counted")
	}
	if _, err := call(time.Second); err != nil {
		t.Fatalf("after healing a reset: %v", err)
	}
	if p.Resets() != resets {
		t.Fatalf("a healed proxy counted %d more resets", p.Resets()-resets)
	}

	p.BlackHole()
	if _, err := call(200 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call into a black hole: %v, want its deadline exceeded", err)
	}
	p.Heal()
	if _, err := call(time.Second); err != nil {
		t.Fatalf("after healing a black hole: %v", err)
	}

	p.DropReplies(1) // executed, reply lost, retried by go-redis: applied twice
	if _, err := call(time.Second); err != nil || p.Cuts() != 1 {
		t.Fatalf("a lost reply: %v, %d cuts", err, p.Cuts())
	}
	if n, _ := c.Get(context.Background(), key).Int(); n != 6 {
		t.Fatalf("counter %d, want 6 (five calls, one applied twice)", n)
	}
}

// A SQL transaction whose COMMIT reply is lost was committed: the client
// sees an error, the database holds the row.
func TestProxyLosesCommitReply(t *testing.T) {
	f := testenv.NewFaultySQL(t, 2)
	ctx := context.Background()
	if _, err := f.DBs[1].ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	f.DropReplyTo("COMMIT", 1)
	tx, err := f.DBs[1].BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("commit whose reply was lost reported success")
	}
	var n int
	if err := f.Direct[1].GetContext(ctx, &n, "SELECT COUNT(*) FROM t"); err != nil || n != 1 {
		t.Fatalf("rows after a commit with a lost reply: %d, %v; want 1", n, err)
	}
	if f.Cuts() != 1 {
		t.Fatalf("%d cuts, want 1", f.Cuts())
	}
}
