package shortlink_test

import (
	"context"
	"errors"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// A visit whose reply is lost, and which go-redis therefore runs again,
// spends one visit, not two.
func TestVisitCountedOnceWhenReplyLost(t *testing.T) {
	ctx := context.Background()
	r, proxy := testenv.NewFaultyRedis(t)
	s := newService(t, r, shortlink.Config{})
	l, err := s.Shorten(ctx, "https://example.com/thrice", shortlink.Options{MaxVisits: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, l.Code); err != nil { // visit 1; the link is now cached here
		t.Fatal(err)
	}
	proxy.DropReplies(1) // the next Redis reply, visit 2's, is lost
	if _, err := s.Resolve(ctx, l.Code); err != nil {
		t.Fatalf("visit 2, reply lost and retried: %v", err)
	}
	if proxy.Cuts() != 1 {
		t.Fatalf("%d replies lost, want 1", proxy.Cuts())
	}
	if _, err := s.Resolve(ctx, l.Code); err != nil {
		t.Fatalf("visit 3: %v (the retried visit counted twice)", err)
	}
	if _, err := s.Resolve(ctx, l.Code); !errors.Is(err, shortlink.ErrMaxVisits) {
		t.Fatalf("visit 4: %v, want ErrMaxVisits", err)
	}
}
