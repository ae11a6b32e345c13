package seckill_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// ownCluster spawns a six-node Redis Cluster for this test alone, so that it
// can fail a master over without disturbing other tests.
func ownCluster(t *testing.T) (*testenv.Redis, *redis.ClusterClient) {
	t.Helper()
	if !devstack.HaveRedisServer() && !testenv.RequireReal() {
		t.Skip("this test fails a cluster over and needs the redis-server binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := devstack.StartRedisCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	t.Cleanup(func() { cc.Close() })
	return &testenv.Redis{Client: cc, Namespace: "cbt:" + devstack.RandomHex(4), Kind: devstack.Spawned}, cc
}

// shard is the master serving key and its replica.
type shard struct {
	master, replica *redis.Client
}

func shardOf(t *testing.T, cc *redis.ClusterClient, key string) shard {
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
					return shard{master: master, replica: replica}
				}
			}
		}
	}
	t.Fatalf("no replica serves slot %d", slot)
	return shard{}
}

// cut makes the replica stop replicating, after it caught up: it is told a
// wrong master password and its link is killed, so its reconnections fail
// and writes to the master from now on reach only the master — as under
// asynchronous replication when the master dies before its last writes left.
func (s shard) cut(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pipe := s.master.Pipeline()
	pipe.Set(ctx, "cbt:sync", 1, time.Minute)
	acked := pipe.Do(ctx, "WAIT", 1, 5000)
	if _, err := pipe.Exec(ctx); err != nil || acked.Val() != int64(1) {
		t.Fatalf("replica did not catch up: %v %v", acked.Val(), err)
	}
	if err := s.replica.ConfigSet(ctx, "masterauth", "not-the-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.replica.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica's link to go down", func() bool {
		return strings.Contains(s.replica.Info(ctx, "replication").Val(), "master_link_status:down")
	})
}

// failover promotes the cut replica (CLUSTER FAILOVER TAKEOVER, as the
// cluster would after the master's death) and waits until the old master
// serves as its replica, having thrown away the writes the new one lacks.
func (s shard) failover(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := s.replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old master to follow the new one", func() bool {
		info := s.master.Info(ctx, "replication").Val()
		return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	if err := s.replica.ConfigSet(ctx, "masterauth", "").Err(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
