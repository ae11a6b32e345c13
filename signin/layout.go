package signin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
)

// Layout is how a user's year of sign-ins (366 bits, 46 bytes) is stored.
type Layout int

const (
	// Bitmaps keeps each user-year as a string key of its own, set with
	// SETBIT: simple, and every key expires on its own, but Redis spends
	// about 180 bytes on a 46-byte year (key, object and allocator overhead).
	Bitmaps Layout = iota
	// Packed keeps each user-year as a field, named by the user id, of a
	// small hash shared by about 64 users of one bucket and year. Redis
	// stores such a hash as one listpack, at about 58 bytes plus the id's
	// length per user-year (numeric ids, stored as integers, take less).
	// Needs Config.Users and user ids of at most 64 bytes.
	Packed
)

func (l Layout) String() string {
	switch l {
	case Bitmaps:
		return "bitmaps"
	case Packed:
		return "packed"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

const (
	// usersPerHash is the Packed layout's target: a hash at twice this many
	// entries is still a listpack under Redis' default
	// hash-max-listpack-entries (128), which a Poisson-distributed hash of
	// mean 64 essentially never reaches.
	usersPerHash = 64
	// maxPackedUser is Redis' default hash-max-listpack-value: a longer
	// field would turn its whole hash into a hash table.
	maxPackedUser = 64
)

// ErrLayout is returned when the bucket a call touches was written with
// another layout (or, for Packed, another Users sizing) than the Service's:
// its data would read as nothing, so nothing is read or written.
var ErrLayout = errors.New("signin: layout mismatch")

// layoutName is what the first write records in each bucket's layout key:
// "bitmaps", or "packed/<hashes per bucket and year>", which decides where
// a user's field is.
func (s *Service) layoutName() string {
	if s.cfg.Layout == Packed {
		return "packed/" + strconv.Itoa(s.hashes)
	}
	return "bitmaps"
}

// slot places a user: its bucket, and for Packed its hash within the bucket
// and year (from independent parts of one hash of the id).
type slot struct {
	bucket string
	hash   string
}

func (s *Service) slotOf(user string) slot {
	h := xxhash.Sum64String(user)
	b := h % uint64(s.cfg.Buckets)
	g := h / uint64(s.cfg.Buckets) % uint64(s.hashes)
	return slot{bucket: "b" + strconv.FormatUint(b, 10), hash: strconv.FormatUint(g, 10)}
}

// year is the key of user's year: its bitmap, or for Packed the hash holding
// its field (named by the user id).
func (s *Service) year(user string, year int) string {
	sl := s.slotOf(user)
	if s.cfg.Layout == Packed {
		return s.space.Key(sl.bucket, "p", strconv.Itoa(year), sl.hash)
	}
	return s.space.Key(sl.bucket, "u", user, strconv.Itoa(year))
}

// frozenYear is the key of user's frozen days of year, laid out as year's
// signed days are (under names Backup's scans do not match).
func (s *Service) frozenYear(user string, year int) string {
	sl := s.slotOf(user)
	if s.cfg.Layout == Packed {
		return s.space.Key(sl.bucket, "pf", strconv.Itoa(year), sl.hash)
	}
	return s.space.Key(sl.bucket, "fz", user, strconv.Itoa(year))
}

// stateKey is the key of user's streak state (a string of numbers, see
// days.lua): a key of its own, or for Packed a field of a hash per group.
func (s *Service) stateKey(user string) string {
	sl := s.slotOf(user)
	if s.cfg.Layout == Packed {
		return s.space.Key(sl.bucket, "ps", sl.hash)
	}
	return s.space.Key(sl.bucket, "st", user)
}

// grants is the key of user's recent freeze grant ids.
func (s *Service) grants(user string) string {
	return s.space.Key(s.slotOf(user).bucket, "u", user, "grants")
}

// layoutKey is the key recording the layout of user's bucket.
func (s *Service) layoutKey(user string) string { return s.space.Key(s.slotOf(user).bucket, "layout") }

// readUser queues the read of user's value in key (a year, or the state).
func (s *Service) readUser(ctx context.Context, pipe redis.Pipeliner, user, key string) *redis.StringCmd {
	if s.cfg.Layout == Packed {
		return pipe.HGet(ctx, key, user)
	}
	return pipe.Get(ctx, key)
}

// checkLayout fails with ErrLayout unless the stored layout (a GET of a
// layout key; redis.Nil when nothing was written yet) is the Service's.
func (s *Service) checkLayout(stored *redis.StringCmd) error {
	v, err := stored.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil
	case err != nil:
		return fmt.Errorf("signin: read layout: %w", err)
	case v != s.layoutName():
		return fmt.Errorf("%w: data written as %s, this Service uses %s", ErrLayout, v, s.layoutName())
	}
	return nil
}

// scriptErr translates a script's layout refusal into ErrLayout.
func scriptErr(err error) error {
	if err == nil {
		return nil
	}
	if _, detail, ok := strings.Cut(err.Error(), "signin: layout mismatch: "); ok {
		return fmt.Errorf("%w: %s", ErrLayout, detail)
	}
	return err
}
