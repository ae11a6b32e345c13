package signin

import (
	"fmt"
	"time"
)

// Date is a calendar day in a user's time zone.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf returns the day t falls on in loc.
func DateOf(t time.Time, loc *time.Location) Date {
	y, m, d := t.In(loc).Date()
	return Date{y, m, d}
}

// ParseDate parses "2006-01-02".
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Date{}, fmt.Errorf("signin: date %q: %w", s, err)
	}
	return DateOf(t, time.UTC), nil
}

func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Day) }

// MarshalText writes d as "2006-01-02" (the zero Date as ""), so that a
// Date in JSON is a string.
func (d Date) MarshalText() ([]byte, error) {
	if d == (Date{}) {
		return []byte{}, nil
	}
	if d.Year < 0 || d.Year > 9999 {
		return nil, fmt.Errorf("signin: date %v outside years 0..9999", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads "2006-01-02" strictly ("" is the zero Date).
func (d *Date) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = Date{}
		return nil
	}
	p, err := ParseDate(string(b))
	if err != nil {
		return err
	}
	if p.String() != string(b) {
		return fmt.Errorf("signin: date %q is not in the form 2006-01-02", b)
	}
	*d = p
	return nil
}

// civil is d at midnight UTC, for day arithmetic free of time zones.
func (d Date) civil() time.Time { return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC) }

// AddDays returns the date n days later (earlier for negative n).
func (d Date) AddDays(n int) Date { return DateOf(d.civil().AddDate(0, 0, n), time.UTC) }

// Before reports whether d is earlier than e.
func (d Date) Before(e Date) bool { return d.civil().Before(e.civil()) }

// offset is d's bit in its year's bitmap: 0 for 1 January.
func (d Date) offset() int64 { return int64(d.civil().YearDay() - 1) }

// daysBetween is the number of days from d to e (negative if e is earlier).
func daysBetween(d, e Date) int { return int(e.civil().Sub(d.civil()).Hours() / 24) }

// dayNumber is d as days since 1970-01-01, the scripts' day numbers.
func dayNumber(d Date) int64 { return d.civil().Unix() / 86400 }

// dates converts the scripts' day numbers.
func dates(numbers []int64) []Date {
	var out []Date
	for _, n := range numbers {
		out = append(out, DateOf(time.Unix(n*86400, 0), time.UTC))
	}
	return out
}

// dayOf is the rule Service.DayOf documents: the date of the local wall
// clock less start, which never goes back when the clock does.
func dayOf(at time.Time, loc *time.Location, start time.Duration) Date {
	t := at.In(loc)
	d := wallDay(t, start)
	// In a repeated hour the wall clock reads again what it read just
	// before the clock was set back: the day that had begun goes on.
	if began, _ := t.ZoneBounds(); !began.IsZero() {
		if e := wallDay(began.Add(-time.Nanosecond).In(loc), start); d.Before(e) {
			d = e
		}
	}
	return d
}

// wallDay is the date of t's wall-clock reading less start, as wall time
// (not elapsed time: a 23- or 25-hour day still starts at start).
func wallDay(t time.Time, start time.Duration) Date {
	y, m, d := t.Date()
	h, mi, sec := t.Clock()
	return DateOf(time.Date(y, m, d, h, mi, sec, t.Nanosecond(), time.UTC).Add(-start), time.UTC)
}
