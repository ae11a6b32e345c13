// Package redisinfo reads the text of Redis' INFO command: its fields, the
// main thread's CPU time and each command's time (commandstats).
package redisinfo

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Field returns the value of field name in info ("" and false when absent).
func Field(info, name string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// MainThreadCPU is the CPU time (user + sys) of the server's main thread,
// from INFO cpu.
func MainThreadCPU(info string) (time.Duration, error) {
	var total time.Duration
	for _, name := range []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"} {
		v, ok := Field(info, name)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", name)
		}
		sec, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", name, err)
		}
		total += time.Duration(sec * float64(time.Second))
	}
	return total, nil
}

// CommandMicros is each command's total time in µs, from INFO commandstats,
// by command name ("evalsha", "zadd", …).
func CommandMicros(info string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				out[name], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return out
}
