package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// scenarioFile is the schema of a -scenario file: one's own system, in the
// same inputs the seeds' scenarios use. README.md documents it; examples.json
// is a sample.
type scenarioFile struct {
	Scenarios []fileScenario `json:"scenarios"`
}

type fileScenario struct {
	Name     string        `json:"name"`
	Replicas *fileReplicas `json:"replicas"` // default 1 replica per primary each
	Loads    []fileLoad    `json:"loads"`
	Storage  []fileStorage `json:"storage"`
}

type fileReplicas struct {
	Redis *int `json:"redis"`
	MySQL *int `json:"mysql"`
}

// fileLoad is a daily volume: per_day, or dau × per_user.
type fileLoad struct {
	Name        string   `json:"name"`
	DAU         float64  `json:"dau"`
	PerUser     float64  `json:"per_user"`
	PerDay      float64  `json:"per_day"`
	Window      string   `json:"window"`      // Go duration ≤ 24h; default "24h"
	Share       *float64 `json:"share"`       // of the day's volume in the window; default 1
	PeakFactor  float64  `json:"peak_factor"` // ≥ 1
	Measurement string   `json:"measurement"` // what serves it, see -only's list
}

// fileStorage is data kept: records (a resident set), or a daily volume
// kept retention_days.
type fileStorage struct {
	Name           string  `json:"name"`
	Records        float64 `json:"records"`
	DAU            float64 `json:"dau"`
	PerUser        float64 `json:"per_user"`
	PerDay         float64 `json:"per_day"`
	RetentionDays  float64 `json:"retention_days"`
	BytesPerRecord float64 `json:"bytes_per_record"`
	On             string  `json:"on"` // "redis" or "mysql"
}

// loadScenarioFile reads and validates a -scenario file against the known
// measurement names.
func loadScenarioFile(path string, known []string) ([]Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f scenarioFile
	if err := decodeFile(data, &f); err != nil {
		return nil, err
	}
	if len(f.Scenarios) == 0 {
		return nil, errors.New(`no "scenarios"`)
	}
	var out []Scenario
	seen := map[string]bool{}
	for _, fs := range f.Scenarios {
		if fs.Name == "" || seen[fs.Name] {
			return nil, fmt.Errorf("scenario %q: a scenario needs a unique, non-empty name", fs.Name)
		}
		seen[fs.Name] = true
		s, err := fs.scenario(known)
		if err != nil {
			return nil, fmt.Errorf("scenario %q: %w", fs.Name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// decodeFile decodes a file the harness reads (a scenario file, a reference
// profile) into v: one JSON value, no field v does not have.
func decodeFile(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func (fs fileScenario) scenario(known []string) (Scenario, error) {
	s := Scenario{Name: fs.Name, Replication: defaultReplication}
	if r := fs.Replicas; r != nil {
		for _, c := range []struct {
			v    *int
			into *int
			name string
		}{{r.Redis, &s.Replication.Redis, "redis"}, {r.MySQL, &s.Replication.MySQL, "mysql"}} {
			if c.v == nil {
				continue
			}
			if *c.v < 0 {
				return s, fmt.Errorf("replicas.%s is %d, want ≥ 0", c.name, *c.v)
			}
			*c.into = *c.v
		}
	}
	if len(fs.Loads) == 0 {
		return s, errors.New(`no "loads"`)
	}
	for _, fl := range fs.Loads {
		l, err := fl.load(known)
		if err != nil {
			return s, fmt.Errorf("load %q: %w", fl.Name, err)
		}
		s.Inputs = append(s.Inputs, fmt.Sprintf("%s: %s, %.0f%% in %s, peak ×%g", fl.Name, volume(fl.DAU, fl.PerUser, l.PerDay), 100*l.Share, shortDuration(l.Window), l.PeakFactor))
		s.Figures = append(s.Figures,
			Figure{Name: "avg " + fl.Name, Unit: "/s", Value: l.Avg()},
			Figure{Name: "peak " + fl.Name, Unit: "/s", Value: l.Peak()})
		s.Sizings = append(s.Sizings, Sizing{What: "peak " + fl.Name + "/s", Peak: l.Peak(), Measurement: fl.Measurement, Answers: "peak " + fl.Name})
	}
	for _, fst := range fs.Storage {
		st, err := fst.storage()
		if err != nil {
			return s, fmt.Errorf("storage %q: %w", fst.Name, err)
		}
		s.Inputs = append(s.Inputs, fmt.Sprintf("%s: %g B/record", fst.Name, fst.BytesPerRecord))
		s.Figures = append(s.Figures, Figure{Name: fst.Name, Unit: "B", Value: st.Bytes()})
		s.Storage = append(s.Storage, st)
	}
	return s, nil
}

func (fl fileLoad) load(known []string) (Load, error) {
	if fl.Name == "" {
		return Load{}, errors.New(`no "name"`)
	}
	perDay, err := dailyVolume(fl.DAU, fl.PerUser, fl.PerDay)
	if err != nil {
		return Load{}, err
	}
	l := Load{PerDay: perDay, Window: day, Share: 1, PeakFactor: fl.PeakFactor}
	if fl.Window != "" {
		if l.Window, err = time.ParseDuration(fl.Window); err != nil || l.Window <= 0 || l.Window > day {
			return l, fmt.Errorf("window %q: want a duration in (0, 24h], like \"4h\"", fl.Window)
		}
	}
	if fl.Share != nil {
		l.Share = *fl.Share
	}
	switch {
	case !(l.Share > 0 && l.Share <= 1):
		return l, fmt.Errorf("share %g: want (0, 1]", l.Share)
	case !(l.PeakFactor >= 1):
		return l, fmt.Errorf("peak_factor %g: want ≥ 1 (the peak second over the window's average)", l.PeakFactor)
	case !slices.Contains(known, fl.Measurement):
		return l, fmt.Errorf("unknown measurement %q (known: %s)", fl.Measurement, strings.Join(known, ", "))
	}
	return l, nil
}

func (fst fileStorage) storage() (Storage, error) {
	st := Storage{What: fst.Name, Records: fst.Records, RetentionDays: fst.RetentionDays, BytesPerRecord: fst.BytesPerRecord, On: Tier(fst.On)}
	switch {
	case fst.Name == "":
		return st, errors.New(`no "name"`)
	case !(fst.BytesPerRecord > 0):
		return st, fmt.Errorf("bytes_per_record %g: want > 0", fst.BytesPerRecord)
	case st.On != TierRedis && st.On != TierMySQL:
		return st, fmt.Errorf(`on %q: want "redis" or "mysql"`, fst.On)
	case fst.Records < 0:
		return st, fmt.Errorf("records %g: want ≥ 0", fst.Records)
	case fst.Records > 0:
		if fst.DAU != 0 || fst.PerUser != 0 || fst.PerDay != 0 || fst.RetentionDays != 0 {
			return st, errors.New("records is a resident set: give it alone, or a daily volume with retention_days")
		}
		return st, nil
	}
	perDay, err := dailyVolume(fst.DAU, fst.PerUser, fst.PerDay)
	if err != nil {
		return st, err
	}
	if !(fst.RetentionDays > 0) {
		return st, fmt.Errorf("retention_days %g: want > 0", fst.RetentionDays)
	}
	st.PerDay = perDay
	return st, nil
}

// dailyVolume is per_day, or dau × per_user: exactly one of the two, all
// positive.
func dailyVolume(dau, perUser, perDay float64) (float64, error) {
	switch {
	case dau < 0 || perUser < 0 || perDay < 0:
		return 0, fmt.Errorf("negative volume (dau %g, per_user %g, per_day %g)", dau, perUser, perDay)
	case perDay > 0 && dau == 0 && perUser == 0:
		return perDay, nil
	case perDay == 0 && dau > 0 && perUser > 0:
		return dau * perUser, nil
	}
	return 0, errors.New("give per_day, or dau and per_user (not both)")
}

func volume(dau, perUser, perDay float64) string {
	if dau > 0 {
		return fmt.Sprintf("%s DAU × %g/day", formatRate(dau), perUser)
	}
	return formatRate(perDay) + "/day"
}

// shortDuration prints 4h, not 4h0m0s.
func shortDuration(d time.Duration) string {
	s := strings.TrimSuffix(d.String(), "m0s")
	if len(s) < len(d.String()) {
		s += "m"
	}
	if t := strings.TrimSuffix(s, "h0m"); t != s {
		return t + "h"
	}
	return s
}
