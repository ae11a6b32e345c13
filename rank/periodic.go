package rank

import (
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Period is the length of a periodic board.
type Period int

// Periods run from the first instant of their first local date — midnight,
// except where a DST change skips midnight (America/Havana, Santiago…), when
// it is the end of the gap — to the first instant of the next period.
const (
	Daily   Period = iota + 1 // one local date
	Weekly                    // ISO weeks, from Monday
	Monthly                   // from the 1st to the next 1st
)

// PeriodicConfig configures Periodic boards.
type PeriodicConfig struct {
	// Board is the template: everything but Epoch, Lifetime and
	// ExpireAfter, which are set per period, is used.
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
	loc := p.cfg.Location
	switch p.cfg.Period {
	case Daily:
		start = dayStart(y, m, d, loc)
		return start, dayStart(y, m, d+1, loc), fmt.Sprintf("%04d-%02d-%02d", y, m, d)
	case Weekly:
		monday := d - (int(t.Weekday())+6)%7
		start = dayStart(y, m, monday, loc)
		iy, iw := time.Date(y, m, monday, 12, 0, 0, 0, time.UTC).ISOWeek()
		return start, dayStart(y, m, monday+7, loc), fmt.Sprintf("%d-W%02d", iy, iw)
	default:
		return dayStart(y, m, 1, loc), dayStart(y, m+1, 1, loc), fmt.Sprintf("%04d-%02d", y, m)
	}
}

// dayStart returns the first instant of the local date y-m-d in loc (d may
// be out of range; it is normalised as time.Date does). That is midnight,
// unless a DST gap skips midnight: time.Date then resolves 00:00 into the
// previous day, and the date really begins where the gap ends.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if ty, tm, td := t.Date(); ty == y && tm == m && td == d {
		return t
	}
	_, end := t.ZoneBounds() // the zone change that skipped midnight
	return end
}
