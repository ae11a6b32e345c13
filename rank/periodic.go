package rank

import (
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Period is the length of a periodic board.
type Period int

const (
	Daily   Period = iota + 1 // local midnight to midnight
	Weekly                    // ISO weeks, Monday 00:00 local
	Monthly                   // the 1st 00:00 local to the next 1st
)

// PeriodicConfig configures Periodic boards.
type PeriodicConfig struct {
	// Board is the template: Name, Namespace, Shards, Resolution, Staleness
	// and Now are used; Epoch, Lifetime and ExpireAfter are set per period.
	Board Config
	// Period is Daily, Weekly or Monthly. Required.
	Period Period
	// Location defines where periods start. Default time.UTC.
	Location *time.Location
	// Retention is how long a board stays readable after its period ends
	// before its keys expire. Default one period length.
	Retention time.Duration
}

// Periodic hands out one Board per period ("weekly-2026-W49"), each
// accepting writes during its period only and expiring Retention after it.
// It is safe for concurrent use.
type Periodic struct {
	c      redis.UniversalClient
	cfg    PeriodicConfig
	mu     sync.Mutex
	boards map[string]*Board
}

// NewPeriodic returns periodic boards on c.
func NewPeriodic(c redis.UniversalClient, cfg PeriodicConfig) (*Periodic, error) {
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.Board.Now == nil {
		cfg.Board.Now = time.Now
	}
	if cfg.Period < Daily || cfg.Period > Monthly {
		return nil, fmt.Errorf("%w: period %d", ErrConfig, cfg.Period)
	}
	if cfg.Board.Name == "" {
		return nil, fmt.Errorf("%w: empty name", ErrConfig)
	}
	return &Periodic{c: c, cfg: cfg, boards: map[string]*Board{}}, nil
}

// Current returns the board of the period now.
func (p *Periodic) Current() (*Board, error) { return p.At(p.cfg.Board.Now()) }

// At returns the board of the period containing t (to read a past one).
func (p *Periodic) At(t time.Time) (*Board, error) {
	start, end, label := p.bounds(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.boards[label]; ok {
		return b, nil
	}
	cfg := p.cfg.Board
	cfg.Name = p.cfg.Board.Name + ":" + label
	cfg.Epoch = start
	cfg.Lifetime = end.Sub(start)
	cfg.ExpireAfter = p.cfg.Retention
	if cfg.ExpireAfter == 0 {
		cfg.ExpireAfter = cfg.Lifetime
	}
	b, err := New(p.c, cfg)
	if err != nil {
		return nil, err
	}
	p.boards[label] = b
	return b, nil
}

// bounds returns the period containing t: start, end and its label.
func (p *Periodic) bounds(t time.Time) (start, end time.Time, label string) {
	t = t.In(p.cfg.Location)
	y, m, d := t.Date()
	switch p.cfg.Period {
	case Daily:
		start = time.Date(y, m, d, 0, 0, 0, 0, p.cfg.Location)
		return start, start.AddDate(0, 0, 1), start.Format("2006-01-02")
	case Weekly:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, p.cfg.Location)
		iy, iw := start.ISOWeek()
		return start, start.AddDate(0, 0, 7), fmt.Sprintf("%d-W%02d", iy, iw)
	default:
		start = time.Date(y, m, 1, 0, 0, 0, 0, p.cfg.Location)
		return start, start.AddDate(0, 1, 0), start.Format("2006-01")
	}
}
