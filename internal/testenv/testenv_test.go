package testenv_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Keys a test writes under its namespace are gone once the test ends, and
// keys outside it are left alone.
func TestRedisCleanupIsScoped(t *testing.T) {
	ctx := context.Background()
	outer := testenv.NewRedis(t)
	keep := outer.Namespace + ":keep"
	if err := outer.Client.Set(ctx, keep, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var inner string
	t.Run("inner", func(t *testing.T) {
		r := testenv.NewRedis(t)
		if r.Namespace == outer.Namespace {
			t.Fatal("namespaces must be unique per test")
		}
		inner = r.Namespace + ":k"
		for _, k := range []string{inner, r.Namespace + ":{tag}:x"} {
			if err := r.Client.Set(ctx, k, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n := outer.Client.Exists(ctx, inner).Val(); n != 0 {
		t.Fatalf("inner test's key survived its cleanup")
	}
	if n := outer.Client.Exists(ctx, keep).Val(); n != 1 {
		t.Fatalf("cleanup of another namespace deleted %s", keep)
	}
	if testenv.RequireReal() && outer.Kind.Fallback() {
		t.Fatalf("REQUIRE_REAL run got %s", outer.Kind)
	}
}

func TestClusterCleanupCoversEveryMaster(t *testing.T) {
	ctx := context.Background()
	var ns string
	c := testenv.NewRedisCluster(t).Client
	t.Run("inner", func(t *testing.T) {
		r := testenv.NewRedisCluster(t)
		ns = r.Namespace
		for i := range 200 { // 200 tags spread over all three masters
			if err := r.Client.Set(ctx, r.Namespace+":{"+string(rune('a'+i%26))+strconv.Itoa(i)+"}", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	var left []string
	if err := testenv.DeleteKeys(ctx, c, ns+"*"); err != nil { // a no-op if cleanup worked
		t.Fatal(err)
	}
	for i := range 200 {
		k := ns + ":{" + string(rune('a'+i%26)) + strconv.Itoa(i) + "}"
		if c.Exists(ctx, k).Val() != 0 {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Fatalf("%d keys survived cleanup, e.g. %s", len(left), left[0])
	}
}

func TestSQLDatabasesAreFreshAndSeparate(t *testing.T) {
	dbs := testenv.NewSQLs(t, 2)
	if _, err := dbs[0].Exec("CREATE TABLE t (id INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbs[1].Exec("CREATE TABLE t (id INTEGER PRIMARY KEY)"); err != nil {
		t.Fatalf("second database is not separate: %v", err)
	}
	if got := dbs[0].DriverName(); testenv.RequireReal() && got != "mysql" {
		t.Fatalf("REQUIRE_REAL run got driver %s, want mysql", got)
	}
}

// ScanKeys lists each matching key once, and no other.
func TestScanKeys(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	for i := range 2500 {
		if err := r.Client.Set(ctx, r.Namespace+"k:"+strconv.Itoa(i), 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r.Client.Set(ctx, r.Namespace+"other", 1, 0)
	got, err := testenv.ScanKeys(ctx, r.Client, r.Namespace+"k:*")
	if err != nil || len(got) != 2500 || !slices.IsSorted(got) {
		t.Fatalf("%d keys (sorted %v): %v", len(got), slices.IsSorted(got), err)
	}
}
