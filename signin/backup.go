package signin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
)

// Backup copies one month of every user's bitmap into SQL, one row per user
// and month (bit i of days = day i+1 signed), replacing an earlier backup of
// that month. It scans every master of a cluster. It returns the users saved.
func (s *Service) Backup(ctx context.Context, db *sqlx.DB, year int, month time.Month) (int, error) {
	first := Date{year, month, 1}
	ndays := daysBetween(first, Date{first.AddDays(32).Year, first.AddDays(32).Month, 1})
	suffix := ":" + strconv.Itoa(year)
	label := fmt.Sprintf("%04d-%02d", year, month)
	var saved atomic.Int64
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, s.space.Pattern()+"{b*}:u:*"+keys.GlobEscape(suffix), 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			user := userOf(key, suffix)
			bitmap, err := node.Get(ctx, key).Bytes()
			if err != nil {
				return err
			}
			var days int64
			for i := range ndays {
				if isSet(bitmap, first.AddDays(i).offset()) {
					days |= 1 << i
				}
			}
			if days == 0 {
				continue
			}
			if _, err := db.ExecContext(ctx, `REPLACE INTO signin_months (user_id, month, days) VALUES (?, ?, ?)`, user, label, days); err != nil {
				return fmt.Errorf("signin: backup %s: %w", user, err)
			}
			saved.Add(1)
		}
		return iter.Err()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan) // masters are scanned concurrently
	} else if c, ok := s.rdb.(*redis.Client); ok {
		err = scan(ctx, c)
	} else {
		err = fmt.Errorf("signin: backup cannot scan a %T", s.rdb)
	}
	return int(saved.Load()), err
}

// userOf recovers the user id from a bitmap key "…{bN}:u:<user>:<year>".
func userOf(key, suffix string) string {
	i := strings.Index(key, "}:u:")
	return keys.Unescape(strings.TrimSuffix(key[i+len("}:u:"):], suffix))
}

// Restore sets in Redis every day of a month that the SQL backup holds (days
// already set stay set). It returns the users restored.
func (s *Service) Restore(ctx context.Context, db *sqlx.DB, year int, month time.Month) (int, error) {
	var rows []struct {
		User string `db:"user_id"`
		Days int64  `db:"days"`
	}
	label := fmt.Sprintf("%04d-%02d", year, month)
	if err := db.SelectContext(ctx, &rows, `SELECT user_id, days FROM signin_months WHERE month = ?`, label); err != nil {
		return 0, fmt.Errorf("signin: read backup %s: %w", label, err)
	}
	first := Date{year, month, 1}
	pipe := s.rdb.Pipeline()
	for i, r := range rows {
		key := s.bitmap(r.User, year)
		for d := range 31 {
			if r.Days&(1<<d) != 0 {
				pipe.SetBit(ctx, key, first.AddDays(d).offset(), 1)
			}
		}
		// A restored old year must not expire on arrival.
		pipe.PExpireAt(ctx, key, time.UnixMilli(max(expiry(year), s.cfg.Now().Add(7*24*time.Hour).UnixMilli())))
		if pipe.Len() > 5000 || i == len(rows)-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, fmt.Errorf("signin: restore: %w", err)
			}
		}
	}
	return len(rows), nil
}
