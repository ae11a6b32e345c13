package shortlink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrConflict is returned by Update when Update.IfVersion is not the
// link's version: someone else changed it first.
var ErrConflict = errors.New("shortlink: version conflict")

// Update is a change of a link's settings for Service.Update. A field left
// at its zero value (nil, or the zero time and duration) is not changed;
// a pointer to a zero value sets it to zero.
type Update struct {
	// URL is the new destination, validated and normalised as Shorten's.
	URL *string
	// ExpiresAt or TTL (not both) set a new expiry, counted from now and
	// bounded as Shorten's: in the future, at most MaxLifetime away. Moving
	// the expiry of an expired link into the future revives it.
	// NeverExpires removes the expiry instead.
	ExpiresAt    time.Time
	TTL          time.Duration
	NeverExpires bool
	// MaxVisits sets the visit limit (0..MaxVisitLimit; 0 removes it). The
	// visits already spent still count: a limit at or below them leaves the
	// link used up, a higher one grants the difference. A link that had no
	// limit has spent its clicks.
	MaxVisits *int64
	// Redirect sets the link's redirect status (0: the service default).
	Redirect *int
	// Tags, when not nil, replaces the link's tags (validated and
	// normalised as Options.Tags); an empty, non-nil slice removes them.
	Tags []string
	// Actor is who makes the change, recorded in the history; validated as
	// Options.Owner.
	Actor string
	// IfVersion, when not 0, applies the change only to that version of
	// the link (Link.Version), else ErrConflict: two editors racing cannot
	// overwrite each other unseen. It also makes a retry safe: sent again
	// after a lost reply, an Update whose change is already the next
	// version, by the same Actor, succeeds without applying twice.
	IfVersion int64
}

// Settings are the parts of a link an Update can change.
type Settings struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`  // zero: never
	MaxVisits int64     `json:"max_visits,omitempty"` // 0: unlimited
	Redirect  int       `json:"redirect,omitempty"`   // 0: the service default
	Tags      []string  `json:"tags,omitempty"`       // normalised, sorted
}

func (l *Link) settings() Settings {
	return Settings{URL: l.URL, ExpiresAt: l.ExpiresAt, MaxVisits: l.MaxVisits, Redirect: l.Redirect, Tags: l.Tags}
}

func (a Settings) equal(b Settings) bool {
	return a.URL == b.URL && unixMilli(a.ExpiresAt) == unixMilli(b.ExpiresAt) && a.MaxVisits == b.MaxVisits && a.Redirect == b.Redirect &&
		slices.Equal(a.Tags, b.Tags)
}

// changed names the settings that differ, as their json names.
func (a Settings) changed(b Settings) []string {
	var c []string
	if a.URL != b.URL {
		c = append(c, "url")
	}
	if unixMilli(a.ExpiresAt) != unixMilli(b.ExpiresAt) {
		c = append(c, "expires_at")
	}
	if a.MaxVisits != b.MaxVisits {
		c = append(c, "max_visits")
	}
	if a.Redirect != b.Redirect {
		c = append(c, "redirect")
	}
	if !slices.Equal(a.Tags, b.Tags) {
		c = append(c, "tags")
	}
	return c
}

// Revision is one change of a link, as History reads it.
type Revision struct {
	Code    string    `json:"code"`
	Domain  string    `json:"domain,omitempty"` // "" for the default domain
	Version int64     `json:"version"`          // the version the change made (the first edit makes 2)
	Actor   string    `json:"actor"`
	At      time.Time `json:"at"`
	Before  Settings  `json:"before"`
	After   Settings  `json:"after"`
	Changed []string  `json:"changed"` // the settings that differ: url, expires_at, max_visits, redirect, tags
}

// checkUpdate validates u as of now, before anything is read.
func (s *Service) checkUpdate(now time.Time, u Update) (Update, error) {
	if u.URL == nil && u.ExpiresAt.IsZero() && u.TTL == 0 && !u.NeverExpires && u.MaxVisits == nil && u.Redirect == nil && u.Tags == nil {
		return u, fmt.Errorf("%w: an update that changes nothing", ErrInvalidOptions)
	}
	if u.URL != nil {
		target, err := s.normalizeURL(*u.URL)
		if err != nil {
			return u, err
		}
		u.URL = &target
	}
	if u.Tags != nil {
		tags, err := normalizeTags(u.Tags)
		if err != nil {
			return u, err
		}
		u.Tags = tags
	}
	if u.NeverExpires && (!u.ExpiresAt.IsZero() || u.TTL != 0) {
		return u, fmt.Errorf("%w: NeverExpires with an expiry", ErrInvalidOptions)
	}
	if _, err := expiry(now, Options{ExpiresAt: u.ExpiresAt, TTL: u.TTL}); err != nil {
		return u, err
	}
	switch {
	case u.MaxVisits != nil && (*u.MaxVisits < 0 || *u.MaxVisits > MaxVisitLimit):
		return u, fmt.Errorf("%w: MaxVisits %d outside 0..%d", ErrInvalidOptions, *u.MaxVisits, MaxVisitLimit)
	case u.Redirect != nil && *u.Redirect != 0 && !validRedirect(*u.Redirect):
		return u, fmt.Errorf("%w: redirect status %d", ErrInvalidOptions, *u.Redirect)
	case !validOwner(u.Actor):
		return u, fmt.Errorf("%w: actor %.64q (at most %d bytes of UTF-8, no control characters)", ErrInvalidOptions, u.Actor, MaxOwner)
	case u.IfVersion < 0:
		return u, fmt.Errorf("%w: IfVersion %d < 0", ErrInvalidOptions, u.IfVersion)
	}
	return u, nil
}

// apply returns from with the checked update u applied at now (to the
// millisecond, as a Revision records it, so that a replay applies the same).
func (u Update) apply(from Settings, now time.Time) Settings {
	to := from
	if u.URL != nil {
		to.URL = *u.URL
	}
	if !u.ExpiresAt.IsZero() {
		to.ExpiresAt = u.ExpiresAt.Truncate(time.Millisecond)
	}
	if u.TTL != 0 {
		to.ExpiresAt = now.Add(u.TTL).Truncate(time.Millisecond)
	}
	if u.NeverExpires {
		to.ExpiresAt = time.Time{}
	}
	if u.MaxVisits != nil {
		to.MaxVisits = *u.MaxVisits
	}
	if u.Redirect != nil {
		to.Redirect = *u.Redirect
	}
	if u.Tags != nil {
		to.Tags = u.Tags
		if len(to.Tags) == 0 {
			to.Tags = nil
		}
	}
	return to
}

// Update changes a link's destination, expiry, visit limit, redirect
// status or tags and returns the link as it now is. Each change makes a new
// version (Link.Version) and a Revision in the link's history, written in
// one SQL transaction with the link; clicks and visits spent are kept. An
// update that would change no value makes no version. Expired and used-up
// links can be edited (and revived). Bad input is refused before anything
// is read or written; an unknown code is ErrNotFound. Without IfVersion,
// concurrent edits all apply, one after the other (the last one's values
// win, each a version of its own); with it, see Update.IfVersion.
//
// Caches: Redis and this process's cache hold the new version when Update
// returns; other processes serve it within LocalTTL (more exactly: within
// LocalTTL of the end of any lookup they had in flight when Update
// returned). A reader filling the caches from an older row never replaces
// a newer version in Redis. If Redis fails after the commit, the change is
// made and the error says the caches were not updated: run the Update again
// with the same IfVersion to update them.
func (s *Service) Update(ctx context.Context, code string, u Update) (*Link, error) {
	ctx, call := s.obs.update.Start(ctx)
	l, err := s.update(ctx, code, u, false, "")
	return l, call.End(err)
}

// maxEditRaces bounds how often an Update without IfVersion reads the link
// again after losing a race to another edit.
const maxEditRaces = 10

func (s *Service) update(ctx context.Context, code string, u Update, owned bool, owner string) (*Link, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	now := s.cfg.Now().Truncate(time.Millisecond)
	u, err := s.checkUpdate(now, u)
	if err != nil {
		return nil, err
	}
	if !s.validKey(code) {
		return nil, ErrNotFound
	}
	for range maxEditRaces {
		r, err := s.load(ctx, code)
		if err == nil && owned && r.Owner != owner {
			err = ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		cur := s.linkOf(r)
		if u.IfVersion != 0 && cur.Version != u.IfVersion {
			if err := s.replayed(ctx, cur, u); err != nil {
				return nil, err
			}
			return cur, s.publish(ctx, cur, cur.settings())
		}
		from := cur.settings()
		to := u.apply(from, now)
		if to.equal(from) {
			return cur, s.publish(ctx, cur, from)
		}
		next := *cur
		next.URL, next.ExpiresAt, next.MaxVisits, next.Redirect, next.Tags, next.Version = to.URL, to.ExpiresAt, to.MaxVisits, to.Redirect, to.Tags, cur.Version+1
		if err := s.indexLink(ctx, cur, added(from.Tags, to.Tags)); err != nil {
			return nil, err
		}
		err = s.commitEdit(ctx, Revision{Code: next.Code, Domain: next.Domain, Version: next.Version, Actor: u.Actor, At: now, Before: from, After: to})
		if errors.Is(err, errRaced) {
			continue // read again: with IfVersion, to tell a conflict from a replay
		}
		if err != nil {
			return nil, err
		}
		s.unindexLink(ctx, cur, added(to.Tags, from.Tags))
		return &next, s.publish(ctx, &next, from)
	}
	return nil, fmt.Errorf("%w: %d concurrent edits in a row won the race", ErrConflict, maxEditRaces)
}

// replayed returns nil when the link's version after u.IfVersion is u
// itself, sent again after a lost reply (the same actor and the same
// change); ErrConflict otherwise.
func (s *Service) replayed(ctx context.Context, cur *Link, u Update) error {
	conflict := fmt.Errorf("%w: the link is at version %d, not %d", ErrConflict, cur.Version, u.IfVersion)
	if cur.Version <= u.IfVersion {
		return conflict
	}
	revs, err := s.revisions(ctx, s.keyOf(cur), u.IfVersion+2, 1)
	if err != nil {
		return err
	}
	if len(revs) == 1 && revs[0].Version == u.IfVersion+1 && revs[0].Actor == u.Actor && u.apply(revs[0].Before, revs[0].At).equal(revs[0].After) {
		return nil
	}
	return conflict
}

// publish puts l, just written or read from SQL, in Redis (unless Redis
// already has a newer version) and in this process's cache, and keeps the
// link's visit counter in step with its settings before the change.
func (s *Service) publish(ctx context.Context, l *Link, before Settings) error {
	key := s.keyOf(l)
	s.flight.Forget(key) // lookups from now on do not join one that may read the old row
	if err := s.fill(ctx, l); err != nil {
		return fmt.Errorf("shortlink: the change is made but the cache was not updated: %w", err)
	}
	// A read's fill of the old version may still wait in ristretto's
	// buffer, and of two new entries of a key ristretto keeps the first:
	// apply it before, so that this one replaces it.
	s.local.Wait()
	s.remember(key, l)
	s.local.Wait() // so that a slower fill of an older version sees this one
	if c, ok := s.local.Get(key); ok && (c.link == nil || c.link.Version < l.Version) {
		s.local.Del(key) // a fill that raced in between won: read again
	}
	visits := s.space.Key(key, "visits")
	var err error
	switch {
	case l.MaxVisits > 0 && before.MaxVisits == 0:
		// A count kept from an earlier limit stopped when the limit went:
		// count again from the clicks.
		err = s.rdb.Del(ctx, visits).Err()
	case l.MaxVisits > 0 && unixMilli(l.ExpiresAt) != unixMilli(before.ExpiresAt):
		err = s.rdb.PExpire(ctx, visits, s.visitLife(l)).Err()
	}
	if err != nil {
		return fmt.Errorf("shortlink: the change is made but the visit counter was not updated: %w", err)
	}
	return nil
}

// HistoryOptions page through History.
type HistoryOptions struct {
	// Before, when not 0, reads the revisions older than that version: the
	// last Version of the page before.
	Before int64
	// Limit is the most revisions returned, 1..MaxHistoryPage [20].
	Limit int
}

// MaxHistoryPage is the largest HistoryOptions.Limit.
const MaxHistoryPage = 100

// History returns a link's revisions, newest first; ErrNotFound for a code
// that does not exist (a deleted link's history goes with it).
func (s *Service) History(ctx context.Context, code string, o HistoryOptions) ([]Revision, error) {
	ctx, call := s.obs.history.Start(ctx)
	revs, err := s.history(ctx, code, o, false, "")
	return revs, call.End(err)
}

func (s *Service) history(ctx context.Context, code string, o HistoryOptions, owned bool, owner string) ([]Revision, error) {
	if o.Limit == 0 {
		o.Limit = 20
	}
	switch {
	case o.Limit < 1 || o.Limit > MaxHistoryPage:
		return nil, fmt.Errorf("%w: history limit %d outside 1..%d", ErrInvalidOptions, o.Limit, MaxHistoryPage)
	case o.Before < 0:
		return nil, fmt.Errorf("%w: history cursor %d < 0", ErrInvalidOptions, o.Before)
	case !s.validKey(code):
		return nil, ErrNotFound
	}
	r, err := s.load(ctx, code)
	if err == nil && owned && r.Owner != owner {
		err = ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	before := o.Before
	if before == 0 {
		before = math.MaxInt64
	}
	return s.revisions(ctx, code, before, o.Limit)
}
