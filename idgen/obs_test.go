package idgen_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// scriptedStore answers the first renewals from a script (nil: ask the
// store), then asks the store.
type scriptedStore struct {
	idgen.NodeStore
	renewals []error
	n        atomic.Int64
}

func (s *scriptedStore) Renew(ctx context.Context, pool string, g idgen.NodeGrant, holder string, ttl time.Duration) error {
	if i := s.n.Add(1) - 1; i < int64(len(s.renewals)) && s.renewals[i] != nil {
		return s.renewals[i]
	}
	return s.NodeStore.Renew(ctx, pool, g, holder, ttl)
}

// TestMetricsAndSpans: a scripted run read with the SDK's manual reader and
// an in-memory span exporter — 21 ids from segments of 10 (3 fetches, no
// fourth), a fetch refused, two node leases (one refused, one renewed,
// failing, then revoked) and a snowflake's checkpoint read and written —
// with every count, the remaining-ids gauge and the spans exact.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()

	seg, err := idgen.NewSegment(ctx, sqlSource(t), idgen.SegmentConfig{Tag: "obs", Step: 10, MaxStep: 10, MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 21 { // ids 1..21: leases [1, 10], [11, 20] and [21, 30], each fetched before it is needed
		if id, err := seg.Next(ctx); err != nil || id != int64(i+1) {
			t.Fatalf("id %d: %d, %v", i+1, id, err)
		}
	}
	long := strings.Repeat("t", 129) // a tag the SQL source refuses
	if _, err := idgen.NewSegment(ctx, sqlSource(t), idgen.SegmentConfig{Tag: long, MeterProvider: mp, TracerProvider: tp}); !errors.Is(err, idgen.ErrSegmentConfig) {
		t.Fatalf("a 129-byte tag: %v", err)
	}
	if got := obstest.Points(t, reader)["casebook.idgen.segment.remaining casebook.idgen.tag=obs"]; got != 9 {
		t.Errorf("remaining ids: %v, want 9 (22..30)", got)
	}
	seg.Close()

	r := testenv.NewRedis(t)
	store := idgen.NewRedisNodeStore(r.Client, r.Namespace)
	quiet := idgen.NodeLeaseConfig{Pool: "quiet", Count: 1, TTL: 10 * time.Second, RenewEvery: 9 * time.Second, MeterProvider: mp, TracerProvider: tp}
	l1, err := idgen.LeaseNode(ctx, store, quiet) // node_grant ok
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idgen.LeaseNode(ctx, store, quiet); !errors.Is(err, idgen.ErrNoFreeNode) { // refused no_free_node
		t.Fatalf("a second lease of a pool of one: %v", err)
	}
	if err := l1.Close(); err != nil { // node_release ok
		t.Fatal(err)
	}
	// A renewal that works, one that fails, one the store refuses: the lease is revoked.
	scripted := &scriptedStore{NodeStore: store, renewals: []error{nil, errors.New("injected renewal failure"), idgen.ErrLeaseLost}}
	l2, err := idgen.LeaseNode(ctx, scripted, idgen.NodeLeaseConfig{Pool: "flaky", Count: 1, TTL: time.Second, RenewEvery: 50 * time.Millisecond,
		MeterProvider: mp, TracerProvider: tp}) // node_grant ok
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease outlived the store's refusal")
	}
	if err := l2.Close(); err != nil { // node_release ok (nothing held: a no-op)
		t.Fatal(err)
	}

	cp := idgen.NewRedisCheckpoint(r.Client, r.Namespace+":checkpoint")
	sf, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1, Checkpoint: cp, Lease: time.Hour, MeterProvider: mp, TracerProvider: tp})
	if err != nil { // checkpoint_load ok, checkpoint_save ok
		t.Fatal(err)
	}
	for range 1000 { // within the reservation: no checkpoint write
		if _, err := sf.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sf.Close()
	_, err = idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 2, Checkpoint: cp, Lease: time.Hour, MaxClockWait: time.Millisecond, MeterProvider: mp, TracerProvider: tp})
	if !errors.Is(err, idgen.ErrClockBackwards) { // checkpoint_load refused clock_backwards: the reservation is an hour ahead
		t.Fatalf("a snowflake behind the checkpoint: %v", err)
	}

	want := map[string]float64{
		"casebook.idgen.node.lease.losses casebook.idgen.loss.cause=revoked": 1,
	}
	wantSpans := map[string]int{}
	for _, c := range []struct {
		name, outcome, reason string
		n                     int
	}{
		{"segment_fetch", "ok", "", 3}, {"segment_fetch", "refused", "invalid", 1},
		{"node_grant", "ok", "", 2}, {"node_grant", "refused", "no_free_node", 1},
		{"node_renew", "ok", "", 1}, {"node_renew", "error", "", 1}, {"node_renew", "refused", "lease_lost", 1},
		{"node_release", "ok", "", 2},
		{"checkpoint_load", "ok", "", 1}, {"checkpoint_load", "refused", "clock_backwards", 1},
		{"checkpoint_save", "ok", "", 1},
	} {
		obstest.AddOp(want, "idgen", c.name, c.outcome, c.reason, float64(c.n))
		wantSpans["idgen."+c.name] += c.n
	}
	// The Segments are closed: their gauge reports nothing.
	obstest.Expect(t, obstest.Points(t, reader), want)
	obstest.ExpectSpans(t, spans, wantSpans)
}
