package signin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/luascript"
)

// Backup copies one month of every user's year into SQL, one row per user
// and month (bit i of days = day i+1 signed), replacing an earlier backup of
// that month. It scans every master of a cluster. It returns the users saved,
// or ErrLayout (having saved nothing) when a bucket holds another layout.
func (s *Service) Backup(ctx context.Context, db *sqlx.DB, year int, month time.Month) (int, error) {
	ctx, call := s.obs.backup.Start(ctx)
	n, err := s.backup(ctx, db, year, month)
	return n, call.End(err)
}

func (s *Service) backup(ctx context.Context, db *sqlx.DB, year int, month time.Month) (int, error) {
	if err := s.checkBuckets(ctx); err != nil {
		return 0, err
	}
	first := Date{year, month, 1}
	label := fmt.Sprintf("%04d-%02d", year, month)
	var saved atomic.Int64
	save := func(ctx context.Context, user string, bits []byte) error {
		var days int64
		for d, i := first, 0; d.Month == month; d, i = d.AddDays(1), i+1 {
			if isSet(bits, d.offset()) {
				days |= 1 << i
			}
		}
		if days == 0 {
			return nil
		}
		if _, err := db.ExecContext(ctx, `REPLACE INTO signin_months (user_id, month, days) VALUES (?, ?, ?)`, user, label, days); err != nil {
			return fmt.Errorf("signin: backup %s: %w", user, err)
		}
		saved.Add(1)
		return nil
	}
	scan := func(ctx context.Context, node *redis.Client) error {
		return s.eachYear(ctx, node, year, save)
	}
	err := keys.EachPrimary(ctx, s.rdb, scan) // masters are scanned concurrently
	return int(saved.Load()), err
}

// checkBuckets fails with ErrLayout if any bucket holds another layout.
func (s *Service) checkBuckets(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, s.cfg.Buckets)
	for b := range cmds {
		cmds[b] = pipe.Get(ctx, s.space.Key("b"+strconv.Itoa(b), "layout"))
	}
	pipe.Exec(ctx) // errors are read per command
	for _, c := range cmds {
		if err := s.checkLayout(c); err != nil {
			return err
		}
	}
	return nil
}

// eachYear calls f with every user-year of year stored on node.
func (s *Service) eachYear(ctx context.Context, node *redis.Client, year int, f func(ctx context.Context, user string, bits []byte) error) error {
	y := strconv.Itoa(year)
	if s.cfg.Layout == Packed {
		iter := node.Scan(ctx, 0, s.space.Pattern()+"{b*}:p:"+y+":*", 1000).Iterator()
		for iter.Next(ctx) {
			fields, err := node.HGetAll(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			for user, bits := range fields {
				if err := f(ctx, user, []byte(bits)); err != nil {
					return err
				}
			}
		}
		return iter.Err()
	}
	suffix := ":" + y
	iter := node.Scan(ctx, 0, s.space.Pattern()+"{b*}:u:*"+keys.GlobEscape(suffix), 1000).Iterator()
	for iter.Next(ctx) {
		bits, err := node.Get(ctx, iter.Val()).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) { // expired since the scan
			return err
		}
		if err := f(ctx, userOf(iter.Val(), suffix), bits); err != nil {
			return err
		}
	}
	return iter.Err()
}

// userOf recovers the user id from a bitmap key "…{bN}:u:<user>:<year>".
func userOf(key, suffix string) string {
	i := strings.Index(key, "}:u:")
	return keys.Unescape(strings.TrimSuffix(key[i+len("}:u:"):], suffix))
}

// Restore sets in Redis every day of a month that the SQL backup holds (days
// already set stay set). It returns the users restored. A backup holding a
// user id the layout cannot store is refused before anything is written; a
// bucket holding another layout fails with ErrLayout.
func (s *Service) Restore(ctx context.Context, db *sqlx.DB, year int, month time.Month) (int, error) {
	ctx, call := s.obs.restore.Start(ctx)
	n, err := s.restore(ctx, db, year, month)
	return n, call.End(err)
}

func (s *Service) restore(ctx context.Context, db *sqlx.DB, year int, month time.Month) (int, error) {
	var rows []struct {
		User string `db:"user_id"`
		Days int64  `db:"days"`
	}
	label := fmt.Sprintf("%04d-%02d", year, month)
	if err := db.SelectContext(ctx, &rows, `SELECT user_id, days FROM signin_months WHERE month = ?`, label); err != nil {
		return 0, fmt.Errorf("signin: read backup %s: %w", label, err)
	}
	for _, r := range rows {
		if err := s.checkUser(r.User); err != nil {
			return 0, fmt.Errorf("signin: restore %s: %w", label, err)
		}
	}
	first := Date{year, month, 1}
	// A restored old year must not expire on arrival.
	expireAt := max(expiry(year), s.cfg.Now().Add(7*24*time.Hour).UnixMilli())
	var calls []luascript.Call
	for i, r := range rows {
		args := []any{r.User, s.layoutName(), expireAt}
		for d := range 31 {
			if r.Days&(1<<d) != 0 {
				args = append(args, first.AddDays(d).offset())
			}
		}
		calls = append(calls, luascript.Call{Script: restoreScript, Keys: []string{s.year(r.User, year), s.layoutKey(r.User)}, Args: args})
		if len(calls) == 1000 || i == len(rows)-1 {
			if _, err := luascript.RunAll(ctx, s.rdb, calls); err != nil {
				return 0, fmt.Errorf("signin: restore: %w", scriptErr(err))
			}
			calls = calls[:0]
		}
	}
	return len(rows), nil
}
