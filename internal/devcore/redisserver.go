package devcore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedisServer is returned when a redis-server process is needed but the
// binary is not on PATH.
var ErrNoRedisServer = errors.New("devstack: redis-server binary not found on PATH")

// RedisServer is a redis-server process this package spawned. It listens on
// 127.0.0.1 only and keeps its files in its own temporary directory.
type RedisServer struct {
	Addr string
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
	exit chan struct{}
}

// HaveRedisServer reports whether a redis-server binary is on PATH.
func HaveRedisServer() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// StartRedisServer spawns redis-server on a free loopback port with no
// persistence, plus any extra arguments (for example "--appendonly", "yes" or
// "--cluster-enabled", "yes"), and waits until it answers PING.
func StartRedisServer(ctx context.Context, extra ...string) (*RedisServer, error) {
	if !HaveRedisServer() {
		return nil, ErrNoRedisServer
	}
	dir, err := tempDir("redis")
	if err != nil {
		return nil, fmt.Errorf("devstack: redis temp dir: %w", err)
	}
	// Another process may take the port between our probe and redis' bind:
	// retry with a fresh port a few times.
	var lastErr error
	for range 5 {
		port, err := freePort(extra)
		if err != nil {
			lastErr = err
			continue
		}
		s := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"),
		}, extra...)
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("devstack: start redis-server: %w", lastErr)
}

func (s *RedisServer) start(ctx context.Context) error {
	s.cmd = exec.Command("redis-server", s.args...)
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) {
		cmd.Wait()
		close(exit)
	}(s.cmd, s.exit)
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		return err
	}
	return nil
}

func (s *RedisServer) waitReady(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-s.exit:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, lastLines(log, 3))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready: %w", s.Addr, err)
		}
	}
}

// Restart kills the process without letting it save (as a crash would) and
// starts it again on the same port and directory with the same arguments, so
// whatever it persisted (an AOF, say) is loaded back.
func (s *RedisServer) Restart(ctx context.Context) error {
	s.kill()
	return s.start(ctx)
}

func (s *RedisServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.exit
	}
}

// Close stops the process and removes its directory.
func (s *RedisServer) Close() error {
	s.kill()
	return os.RemoveAll(s.dir)
}

// freePort finds a free loopback port. A cluster node also needs port+10000
// (its bus port) free.
func freePort(args []string) (int, error) {
	cluster := false
	for _, a := range args {
		if a == "--cluster-enabled" {
			cluster = true
		}
	}
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			l.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

func lastLines(b []byte, n int) string {
	end := len(b)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' && i < end-1 {
			n--
			if n == 0 {
				return string(b[i+1 : end])
			}
		}
	}
	return string(b[:end])
}
