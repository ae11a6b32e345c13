package testenv

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
)

// NewPrivateCluster spawns a six-node Redis Cluster (three masters, a
// replica each) for this test alone, so that it can fail a master over
// without disturbing other tests. It needs the redis-server binary (skip
// otherwise, fail under CASEBOOK_REQUIRE_REAL).
func NewPrivateCluster(t testing.TB) (*Redis, *redis.ClusterClient) {
	t.Helper()
	if !devstack.HaveRedisServer() && !RequireReal() {
		t.Skip("testenv: this test fails a cluster over and needs the redis-server binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := devstack.StartRedisCluster(ctx)
	if err != nil {
		t.Fatalf("testenv: private cluster: %v", err)
	}
	t.Cleanup(func() { rc.Close() })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	t.Cleanup(func() { cc.Close() })
	return &Redis{Client: cc, Namespace: namespace(t), Kind: devstack.Spawned}, cc
}

// Shard is the master serving a key of a cluster, and its replica.
type Shard struct {
	Master, Replica *redis.Client
	key             string
}

// ShardOf finds the master and the replica serving key.
func ShardOf(t testing.TB, cc *redis.ClusterClient, key string) Shard {
	t.Helper()
	ctx := context.Background()
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	slot := cc.ClusterKeySlot(ctx, key).Val()
	for _, sh := range cc.ClusterShards(ctx).Val() {
		for _, r := range sh.Slots {
			if slot < r.Start || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "replica" {
					replica := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))})
					t.Cleanup(func() { replica.Close() })
					return Shard{Master: master, Replica: replica, key: key}
				}
			}
		}
	}
	t.Fatalf("testenv: no replica serves slot %d", slot)
	return Shard{}
}

// Cut makes the replica stop replicating, after it caught up: it is told a
// wrong master password and its link is killed, so its reconnections fail
// and writes to the master from now on reach only the master — as under
// asynchronous replication when the master dies before its last writes left.
func (s Shard) Cut(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	pipe := s.Master.Pipeline()
	pipe.Set(ctx, sameSlot(s.key)+":cbt-sync", 1, time.Minute)
	acked := pipe.Do(ctx, "WAIT", 1, 5000)
	if _, err := pipe.Exec(ctx); err != nil || acked.Val() != int64(1) {
		t.Fatalf("testenv: replica did not catch up: %v %v", acked.Val(), err)
	}
	if err := s.Replica.ConfigSet(ctx, "masterauth", "not-the-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Replica.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, "the replica's link to go down", func() bool {
		return strings.Contains(s.Replica.Info(ctx, "replication").Val(), "master_link_status:down")
	})
}

// Failover promotes the cut replica (CLUSTER FAILOVER TAKEOVER, as the
// cluster would after the master's death) and waits until the old master
// serves as its replica, having thrown away the writes the new one lacks.
func (s Shard) Failover(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if err := s.Replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	// The old master learns of the takeover by gossip and then resyncs in
	// full (its last writes are thrown away): on a loaded machine, slowly.
	var info string
	defer func() {
		if t.Failed() { // what the nodes say, for the next reader of this failure
			t.Logf("old master: %s\nits view of the cluster:\n%s\nits log:\n%s\nnew master: %s\nits log:\n%s",
				info, s.Master.ClusterNodes(ctx).Val(), logTail(s.Master, 40), s.Replica.Info(ctx, "replication").Val(), logTail(s.Replica, 40))
		}
	}()
	waitFor(t, "the old master to follow the new one", 90*time.Second, func() bool {
		info = s.Master.Info(ctx, "replication").Val()
		return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	if err := s.Replica.ConfigSet(ctx, "masterauth", "").Err(); err != nil {
		t.Fatal(err)
	}
}

// logTail returns the last n lines of a local server's log file.
func logTail(c *redis.Client, n int) string {
	m, err := c.ConfigGet(context.Background(), "logfile").Result()
	if err != nil || m["logfile"] == "" {
		return "(no log file)"
	}
	b, err := os.ReadFile(m["logfile"])
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// WaitFor polls ok every 20 ms for up to 30 s, failing the test with what it
// waited for.
func WaitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	waitFor(t, what, 30*time.Second, ok)
}

func waitFor(t testing.TB, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// sameSlot returns a prefix whose keys hash to key's slot: key itself when
// it has a hash tag, else key as the tag.
func sameSlot(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key
		}
	}
	return "{" + key + "}"
}
