package seckill

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// LoadScripts puts the package's scripts in c's script cache, so that a test
// counting commands sees no EVALSHA answered NOSCRIPT and sent again as EVAL.
func LoadScripts(ctx context.Context, c redis.Scripter) error {
	for _, sc := range []*redis.Script{buyScript, takeScript, unquotaScript, closeScript, rebuildScript} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Home is the bucket holding user's quota.
func (sl *Sale) Home(user string) int { return sl.home(user) }

// Key is the key of part of bucket b.
func (sl *Sale) Key(b int, part string) string { return sl.key(b, part) }

// OpenReservations counts the reservations open in Redis, over all buckets.
func (sl *Sale) OpenReservations(ctx context.Context) (int64, error) {
	var n int64
	for b := range sl.c.Buckets {
		recs, err := sl.s.rdb.HGetAll(ctx, sl.key(b, "res")).Result()
		if err != nil {
			return 0, err
		}
		for batch, v := range recs {
			nb, _ := strconv.ParseInt(batch, 10, 64)
			open, err := sl.expand(b, nb, v)
			if err != nil {
				return 0, err
			}
			n += int64(len(open))
		}
	}
	return n, nil
}

// RecordOf names the record holding reservation id: its bucket's
// reservations hash and the batch's field.
func RecordOf(sl *Sale, id string) (key, field string, err error) {
	r, err := splitID(id)
	if err != nil {
		return "", "", err
	}
	return sl.key(r.bucket, "res"), strconv.FormatInt(r.batch, 10), nil
}

// Reservation reads reservation id as ReleaseDue reads it ("" once closed).
func (sl *Sale) Reservation(ctx context.Context, id string) (string, error) {
	r, err := splitID(id)
	if err != nil {
		return "", err
	}
	open, err := sl.batchReservations(ctx, r.bucket, r.batch)
	return open[id], err
}

// Close closes reservation id as ReleaseDue does, restocking it if asked.
func (sl *Sale) Close(ctx context.Context, id string, restock bool) (bool, error) {
	r, err := splitID(id)
	if err != nil {
		return false, err
	}
	return sl.close(ctx, r.bucket, id, restock)
}

// SettleRead settles reservation id as a release pass that read it as res,
// and reports whether this call restocked it.
func (sl *Sale) SettleRead(ctx context.Context, id, res string) (bool, error) {
	r, err := splitID(id)
	if err != nil {
		return false, err
	}
	return sl.settle(ctx, r.bucket, id, res, nil)
}
