package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// OpenClusterOrStandalone is for examples: the Redis Cluster at addrs, else a
// spawned six-node cluster, else — on a machine without the redis-server
// binary — one embedded Redis, saying so on w.
func OpenClusterOrStandalone(ctx context.Context, addrs []string, w io.Writer) (*Redis, error) {
	r, err := OpenRedisCluster(ctx, addrs)
	if errors.Is(err, ErrNoRedisServer) {
		fmt.Fprintln(w, "note: no redis-server binary, so no local Redis Cluster; using one embedded Redis instead")
		return OpenRedis(ctx, "")
	}
	return r, err
}

// Stack is the set of backends an example runs on.
type Stack struct {
	Redis *Redis
	Kafka *Kafka
	SQL   *SQL
}

// OpenStack opens what the environment names — CASEBOOK_REDIS_CLUSTER,
// CASEBOOK_KAFKA_BROKERS, CASEBOOK_MYSQL_DSN (a scratch database named
// sqlPrefix_…) — and embedded stand-ins for the rest.
func OpenStack(ctx context.Context, sqlPrefix string, w io.Writer) (*Stack, error) {
	s := &Stack{}
	var err error
	if s.Redis, err = OpenClusterOrStandalone(ctx, SplitList(os.Getenv("CASEBOOK_REDIS_CLUSTER")), w); err != nil {
		return nil, err
	}
	if s.Kafka, err = OpenKafka(SplitList(os.Getenv("CASEBOOK_KAFKA_BROKERS"))); err != nil {
		s.Close()
		return nil, err
	}
	if s.SQL, err = OpenSQL(ctx, os.Getenv("CASEBOOK_MYSQL_DSN"), sqlPrefix); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes whatever was opened.
func (s *Stack) Close() {
	if s.SQL != nil {
		s.SQL.Close()
	}
	if s.Kafka != nil {
		s.Kafka.Close()
	}
	if s.Redis != nil {
		s.Redis.Close()
	}
}
