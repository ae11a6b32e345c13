package devcore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a six-node Redis Cluster (three masters with one replica
// each) spawned on loopback, set up the way the Redis test suite does it: no
// redis-cli, only CLUSTER MEET, ADDSLOTSRANGE and REPLICATE, then polled until
// every node agrees on the slot map.
type RedisCluster struct {
	Nodes []*RedisServer
}

const (
	clusterMasters  = 3
	clusterReplicas = 1
)

// StartRedisCluster spawns and configures the cluster. It takes a few seconds.
func StartRedisCluster(ctx context.Context) (*RedisCluster, error) {
	rc := &RedisCluster{}
	n := clusterMasters * (1 + clusterReplicas)
	for range n {
		s, err := StartRedisServer(ctx, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
			"--repl-diskless-sync-delay", "0",
			// CLUSTER SLOTS lists a replica only once its replication offset
			// moved, which on an idle master takes one replica ping.
			"--repl-ping-replica-period", "1")
		if err != nil {
			rc.Close()
			return nil, err
		}
		rc.Nodes = append(rc.Nodes, s)
	}
	if err := rc.configure(ctx); err != nil {
		rc.Close()
		return nil, fmt.Errorf("devstack: configure redis cluster: %w", err)
	}
	return rc, nil
}

// Addrs lists every node's address, for redis.ClusterOptions.Addrs.
func (rc *RedisCluster) Addrs() []string {
	addrs := make([]string, len(rc.Nodes))
	for i, s := range rc.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Close stops every node.
func (rc *RedisCluster) Close() error {
	var errs []error
	for _, s := range rc.Nodes {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

func (rc *RedisCluster) configure(ctx context.Context) error {
	clients := make([]*redis.Client, len(rc.Nodes))
	for i, s := range rc.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer clients[i].Close()
	}
	ids := make([]string, len(clients))
	for i, c := range clients {
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("cluster myid: %w", err)
		}
		ids[i] = id
	}
	// Distinct config epochs before the nodes meet, as redis-cli --cluster
	// create sets them: masters left at epoch 0 resolve their collision by
	// bumping epochs one at a time after they meet, and a failover forced
	// while that runs can lose to the old master, which then bumps past the
	// promoted replica and takes its slots back (seen: the promoted node
	// back as a replica of the old master, which kept its writes).
	for i, c := range clients {
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("cluster set-config-epoch: %w", err)
		}
	}
	for _, s := range rc.Nodes[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(s.Port)).Err(); err != nil {
			return fmt.Errorf("cluster meet: %w", err)
		}
	}
	per := 16384 / clusterMasters
	for m := range clusterMasters {
		lo, hi := m*per, (m+1)*per-1
		if m == clusterMasters-1 {
			hi = 16383
		}
		if err := clients[m].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("cluster addslotsrange: %w", err)
		}
	}
	// A replica can only follow a master it already knows.
	if err := poll(ctx, "every node knows every other", func() (bool, error) {
		for _, c := range clients {
			nodes, err := c.ClusterNodes(ctx).Result()
			if err != nil {
				return false, err
			}
			if strings.Count(nodes, "\n") < len(clients) || strings.Contains(nodes, "handshake") {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	for r := clusterMasters; r < len(clients); r++ {
		master := ids[(r-clusterMasters)%clusterMasters]
		if err := clients[r].ClusterReplicate(ctx, master).Err(); err != nil {
			return fmt.Errorf("cluster replicate: %w", err)
		}
	}
	want := fmt.Sprintf("cluster_current_epoch:%d\r\n", len(clients))
	return poll(ctx, "every node agrees on the slot map and the epoch", func() (bool, error) {
		var first []string
		for _, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				return false, nil
			}
			shards, err := c.ClusterShards(ctx).Result()
			if err != nil {
				return false, err
			}
			view := describeShards(shards)
			if len(view) != clusterMasters {
				return false, nil
			}
			if first == nil {
				first = view
			} else if !reflect.DeepEqual(first, view) {
				return false, nil
			}
		}
		return true, nil
	})
}

// describeShards renders CLUSTER SHARDS as comparable strings, and only
// counts shards that already have their replica online.
func describeShards(shards []redis.ClusterShard) []string {
	var out []string
	for _, sh := range shards {
		var ids []string
		for _, n := range sh.Nodes {
			if n.Health == "online" {
				ids = append(ids, n.Role+"="+n.ID)
			}
		}
		if len(ids) != 1+clusterReplicas || len(sh.Slots) == 0 {
			continue
		}
		sort.Strings(ids)
		var ranges []string
		for _, r := range sh.Slots {
			ranges = append(ranges, fmt.Sprintf("%d-%d", r.Start, r.End))
		}
		out = append(out, strings.Join(ranges, ",")+":"+strings.Join(ids, ","))
	}
	sort.Strings(out)
	return out
}

func poll(ctx context.Context, what string, ok func() (bool, error)) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		done, err := ok()
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting until %s (last error: %v)", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
