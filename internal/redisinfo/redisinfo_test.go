package redisinfo

import (
	"testing"
	"time"
)

const sample = "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\n# CPU\r\nused_cpu_sys:9.5\r\nused_cpu_sys_main_thread:1.25\r\nused_cpu_user_main_thread:0.5\r\n" +
	"# Commandstats\r\ncmdstat_evalsha:calls=10,usec=1500,usec_per_call=150.00,rejected_calls=0,failed_calls=0\r\ncmdstat_zadd:calls=2,usec=7,usec_per_call=3.50\r\n"

// Fields, the main thread's CPU and commandstats are read from INFO's text
// as Redis writes it (CRLF lines, section headers); a field named as a
// prefix of another is not taken for it.
func TestRead(t *testing.T) {
	if v, ok := Field(sample, "process_id"); !ok || v != "4242" {
		t.Errorf("process_id: %q, %v", v, ok)
	}
	if v, ok := Field(sample, "used_cpu_sys"); !ok || v != "9.5" {
		t.Errorf("used_cpu_sys: %q, %v", v, ok)
	}
	if _, ok := Field(sample, "redis"); ok {
		t.Error("a prefix of a field name found a value")
	}
	if cpu, err := MainThreadCPU(sample); err != nil || cpu != 1750*time.Millisecond {
		t.Errorf("main thread CPU %v, %v; want 1.75s", cpu, err)
	}
	if _, err := MainThreadCPU("# CPU\r\nused_cpu_sys:1\r\n"); err == nil {
		t.Error("no main thread fields: no error")
	}
	if _, err := MainThreadCPU("used_cpu_user_main_thread:x\r\nused_cpu_sys_main_thread:1\r\n"); err == nil {
		t.Error("a malformed value: no error")
	}
	got := CommandMicros(sample)
	if len(got) != 2 || got["evalsha"] != 1500 || got["zadd"] != 7 {
		t.Errorf("commandstats %v", got)
	}
}
