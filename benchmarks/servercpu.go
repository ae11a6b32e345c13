package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/internal/redisinfo"
)

// Every Redis- or MySQL-bound measurement is sized by the CPU time its
// server spent, not by the rate this machine's closed loop reached: the
// loop's rate follows its worker count and whatever shares the machine,
// while the server's CPU time per operation is what a server core costs.
// Redis gives it in INFO cpu (its main threads, on every primary); MySQL
// does not, so the harness reads the server process's CPU time from
// /proc/<pid>/stat when the server runs on this machine. Where neither can
// be read the measurement says why, and its sizing uses the closed-loop
// rate.

// serverCPUOf is the reader of the server CPU time behind a measurement of
// tier t on env, with what it reads, or nil and why there is none.
func (e *Env) serverCPUOf(ctx context.Context, t Tier) (read func(context.Context) (time.Duration, error), what string) {
	switch t {
	case TierRedis:
		r := e.redis // opened by Setup
		switch {
		case r == nil:
			return nil, "server CPU unavailable: no Redis opened"
		case r.Kind == devcore.Miniredis:
			return nil, "server CPU unavailable: miniredis runs inside this process"
		}
		n := 0
		read = func(ctx context.Context) (time.Duration, error) {
			cpu, primaries, err := redisPrimariesCPU(ctx, r.Client)
			n = primaries
			return cpu, err
		}
		if _, err := read(ctx); err != nil {
			return nil, "server CPU unavailable: " + err.Error()
		}
		return read, "INFO cpu: main threads of " + plural(n, "primary", "primaries")
	case TierMySQL:
		if e.MySQLDSN == "" {
			return nil, "server CPU unavailable: SQLite runs inside this process"
		}
		pid, err := e.mysqlPID(ctx)
		if err != nil {
			return nil, "server CPU unavailable: " + err.Error()
		}
		read = func(context.Context) (time.Duration, error) { return processCPU(pid) }
		if _, err := read(ctx); err != nil {
			return nil, "server CPU unavailable: " + err.Error()
		}
		return read, fmt.Sprintf("/proc/%d/stat of the MySQL server", pid)
	}
	return nil, ""
}

// mysqlPID finds the process of the MySQL server env names, when it runs on
// this machine: the server's @@pid_file, read here, must name a live
// mysqld or mariadbd.
func (e *Env) mysqlPID(ctx context.Context) (int, error) {
	cfg, err := mysql.ParseDSN(e.MySQLDSN)
	if err != nil {
		return 0, err
	}
	if cfg.Net != "unix" && !isLoopback(cfg.Addr) {
		return 0, fmt.Errorf("the MySQL server at %s is not on this machine", cfg.Addr)
	}
	s, err := e.SQL(ctx)
	if err != nil {
		return 0, err
	}
	var pidFile string
	if err := s.DB.QueryRowContext(ctx, "SELECT @@pid_file").Scan(&pidFile); err != nil {
		return 0, fmt.Errorf("SELECT @@pid_file: %w", err)
	}
	if !filepath.IsAbs(pidFile) {
		var datadir string
		if err := s.DB.QueryRowContext(ctx, "SELECT @@datadir").Scan(&datadir); err != nil {
			return 0, fmt.Errorf("SELECT @@datadir: %w", err)
		}
		pidFile = filepath.Join(datadir, pidFile)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("the server's pid file is not readable here (%w): is it in another container?", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s holds %q", pidFile, strings.TrimSpace(string(b)))
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return 0, fmt.Errorf("no process %d here: %w", pid, err)
	}
	if c := strings.TrimSpace(string(comm)); c != "mariadbd" && c != "mysqld" {
		return 0, fmt.Errorf("process %d is %q, not mysqld or mariadbd", pid, c)
	}
	return pid, nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" || host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux architecture Go runs on.
const clockTicks = 100

// processCPU is the user + system CPU time process pid has spent, from
// /proc/<pid>/stat (fields 14 and 15, counted after the parenthesised
// command name, which may hold spaces).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (time.Duration, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	fields := strings.Fields(s[end+1:])
	// fields[0] is field 3 (state): utime is field 14, stime 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name", len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// redisPrimariesCPU is the CPU time (user + sys) the main threads of
// rdb's primaries have spent, from INFO cpu, and how many primaries it read.
func redisPrimariesCPU(ctx context.Context, rdb redis.UniversalClient) (time.Duration, int, error) {
	var mu sync.Mutex
	primaries := 0
	var total time.Duration
	read := func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		cpu, err := redisinfo.MainThreadCPU(info)
		if err != nil {
			return err
		}
		mu.Lock()
		total += cpu
		mu.Unlock()
		mu.Lock()
		primaries++
		mu.Unlock()
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = fmt.Errorf("cannot read the CPU time of a %T", c)
	}
	return total, primaries, err
}
