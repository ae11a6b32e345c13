package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// referenceJSON is the profile shipped with the harness: every measurement
// made on real servers (README.md, "Capacity planning", says by which
// command), so that a run on embedded stand-ins still sizes every load.
//
//go:embed reference.json
var referenceJSON []byte

// Reference is a reference profile: measurements made on real Redis and
// MySQL servers, with what they ran on. A run whose measurement fell back to
// an embedded stand-in sizes its loads from the profile's figure instead.
type Reference struct {
	// Command is what produced the profile, to run again on other hardware.
	Command string `json:"command"`
	// Date is the day it was made (YYYY-MM-DD), for the report's labels.
	Date     string  `json:"date"`
	Duration string  `json:"duration"` // of each measurement
	Machine  Machine `json:"machine"`
	Versions struct {
		Go    string `json:"go"`
		Redis string `json:"redis"`
		MySQL string `json:"mysql"` // SELECT VERSION(): "10.11.6-MariaDB-…"
	} `json:"versions"`
	Measurements []Result `json:"measurements"`
	// Source is where the profile was read from (not in the file).
	Source string `json:"-"`
}

// Machine is the hardware a profile was measured on.
type Machine struct {
	Cores int    `json:"cores"`
	CPU   string `json:"cpu"`
	OS    string `json:"os"`
}

// loadReference reads the profile at path, or the embedded one when path
// is empty. A profile must name its servers and date and hold only figures
// made on real servers; one lacking a measurement is valid (those loads are
// then not sized on stand-ins, and the report says so).
func loadReference(path string) (*Reference, error) {
	data, source := referenceJSON, "benchmarks/reference.json (embedded)"
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, err
		}
		source = path
	}
	ref := &Reference{Source: source}
	if err := decodeFile(data, ref); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if _, err := time.Parse(time.DateOnly, ref.Date); err != nil {
		return nil, fmt.Errorf("%s: date %q is not YYYY-MM-DD", source, ref.Date)
	}
	if ref.Versions.Redis == "" || ref.Versions.MySQL == "" || ref.Machine.Cores < 1 {
		return nil, fmt.Errorf("%s: names no Redis or MySQL version, or no cores", source)
	}
	seen := map[string]bool{}
	for _, r := range ref.Measurements {
		switch {
		case seen[r.Name]:
			return nil, fmt.Errorf("%s: %s appears twice", source, r.Name)
		case r.Fallback || r.Err != "" || !(r.PerSec > 0):
			return nil, fmt.Errorf("%s: %s is not a figure measured on a real server", source, r.Name)
		}
		seen[r.Name] = true
	}
	return ref, nil
}

// lookup is the profile's figure for a measurement.
func (ref *Reference) lookup(name string) (Result, bool) {
	if ref == nil {
		return Result{}, false
	}
	i := slices.IndexFunc(ref.Measurements, func(r Result) bool { return r.Name == name })
	if i < 0 {
		return Result{}, false
	}
	return ref.Measurements[i], true
}

// missing lists the names among want that the profile has no figure for.
func (ref *Reference) missing(want []Measurement) []string {
	if ref == nil {
		return nil
	}
	var out []string
	for _, m := range want {
		if _, ok := ref.lookup(m.Name); !ok {
			out = append(out, m.Name)
		}
	}
	return out
}

// label says which server a tier's reference figures were measured on:
// "reference: Redis 7.0.15 on 2 cores, 2026-12-01"; an app node's were
// measured in front of both.
func (ref *Reference) label(t Tier) string {
	server := map[Tier]string{TierRedis: "Redis " + ref.Versions.Redis, TierMySQL: sqlProduct(ref.Versions.MySQL)}[t]
	if server == "" {
		server = "Redis " + ref.Versions.Redis + " and " + sqlProduct(ref.Versions.MySQL)
	}
	return fmt.Sprintf("reference: %s on %d cores, %s", server, ref.Machine.Cores, ref.Date)
}

// sqlProduct names a SELECT VERSION() string: "10.11.6-MariaDB-0+deb12u1"
// is "MariaDB 10.11.6", "8.0.36" is "MySQL 8.0.36".
func sqlProduct(version string) string {
	num, rest, _ := strings.Cut(version, "-")
	if strings.Contains(rest, "MariaDB") {
		return "MariaDB " + num
	}
	return "MySQL " + num
}

// ReferenceInfo is what the plan says about the profile it sized from.
type ReferenceInfo struct {
	Source   string   `json:"source"`
	Command  string   `json:"command"`
	Date     string   `json:"date"`
	Machine  Machine  `json:"machine"`
	Go       string   `json:"go"`
	Redis    string   `json:"redis"`
	MySQL    string   `json:"mysql"`
	Missing  []string `json:"missing,omitempty"` // measurements run here that it has no figure for
	Duration string   `json:"duration"`
}

func (ref *Reference) info(ran []Result) *ReferenceInfo {
	in := &ReferenceInfo{Source: ref.Source, Command: ref.Command, Date: ref.Date, Machine: ref.Machine,
		Go: ref.Versions.Go, Redis: ref.Versions.Redis, MySQL: ref.Versions.MySQL, Duration: ref.Duration}
	for _, r := range ran {
		if _, ok := ref.lookup(r.Name); !ok {
			in.Missing = append(in.Missing, r.Name)
		}
	}
	return in
}

// writeReference writes results, made on env's real servers, as a profile
// at path. It refuses results made on a stand-in or failed: a profile holds
// only real figures.
func writeReference(ctx context.Context, path string, env *Env, results []Result, d time.Duration, command string) error {
	for _, r := range results {
		if r.Fallback || r.Err != "" {
			return fmt.Errorf("-write-reference: %s did not run on a real server (%s); nothing written",
				r.Name, cmp.Or(r.Err, "embedded stand-in"))
		}
	}
	ref := Reference{Command: command, Date: time.Now().UTC().Format(time.DateOnly), Duration: d.String(),
		Machine: Machine{Cores: runtime.NumCPU(), CPU: cpuModel(), OS: runtime.GOOS + "/" + runtime.GOARCH}}
	ref.Versions.Go = runtime.Version()
	var err error
	if ref.Versions.Redis, err = env.redisVersion(ctx); err != nil {
		return fmt.Errorf("-write-reference: Redis version: %w", err)
	}
	if ref.Versions.MySQL, err = env.sqlVersion(ctx); err != nil {
		return fmt.Errorf("-write-reference: MySQL version: %w", err)
	}
	for _, r := range results {
		r.Distribution = nil
		ref.Measurements = append(ref.Measurements, r)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ref); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// cpuModel is the first "model name" of /proc/cpuinfo, or the architecture
// where there is none.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
