package notify

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed groups.lua
	groupsSource string
	groupsScript = redis.NewScript(groupsSource)
	//go:embed mark.lua
	markSource string
	markScript = redis.NewScript(markSource)
)

// stored is a group as add.lua keeps it: distinct actors, the first
// MaxActors of them, first and last times (unix ms, as text).
type stored struct {
	N int64    `json:"n"`
	A []string `json:"a"`
	F string   `json:"f"`
	L string   `json:"l"`
}

// Groups returns up to n of user's groups, the most recently updated first,
// from cursor ("" for the first page; then Page.Next). A cursor is a place
// in the user's update order, so a group updated while paging moves to the
// top and is not shown twice on later pages. A full page always carries a
// Next, which may lead to an empty page.
func (f *Feed) Groups(ctx context.Context, user, cursor string, n int) (_ Page, err error) {
	ctx, call := f.obs.groups.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(user); err != nil {
		return Page{}, err
	}
	if n < 1 || n > MaxPage {
		return Page{}, fmt.Errorf("%w: page of %d (1..%d)", ErrInvalid, n, MaxPage)
	}
	below := "+inf"
	if cursor != "" {
		seq, err := decodeCursor(cursor)
		if err != nil {
			return Page{}, err
		}
		below = "(" + strconv.FormatInt(seq, 10)
	}
	ks := f.keys(user)
	res, err := groupsScript.Run(ctx, f.rdb, []string{ks.groups, ks.data, ks.unseen, ks.unread}, below, n).Slice()
	if err != nil {
		return Page{}, fmt.Errorf("notify: read groups: %w", err)
	}
	page := Page{Groups: make([]Group, 0, len(res)/5)}
	var last int64
	for i := 0; i+4 < len(res); i += 5 {
		g, err := group(res[i : i+5])
		if err != nil {
			return Page{}, fmt.Errorf("notify: read groups: %w", err)
		}
		seq, _ := res[i+1].(string)
		last, _ = strconv.ParseInt(seq, 10, 64)
		page.Groups = append(page.Groups, g)
	}
	if len(page.Groups) == n {
		page.Next = encodeCursor(last)
	}
	return page, nil
}

// group decodes groups.lua's {gid, seq, json, unseen, unread}.
func group(r []any) (Group, error) {
	gid, _ := r[0].(string)
	raw, _ := r[2].(string)
	verb, object, _, ok := parseGroupID(gid)
	var s stored
	if err := json.Unmarshal([]byte(raw), &s); !ok || err != nil {
		return Group{}, fmt.Errorf("group %.80q stored as %.200q: %v", gid, raw, err)
	}
	first, err1 := strconv.ParseInt(s.F, 10, 64)
	last, err2 := strconv.ParseInt(s.L, 10, 64)
	if err1 != nil || err2 != nil {
		return Group{}, fmt.Errorf("group %.80q stored with times %q, %q", gid, s.F, s.L)
	}
	unseen, _ := r[3].(int64)
	unread, _ := r[4].(int64)
	return Group{ID: gid, Verb: verb, Object: object, ActorCount: s.N, Actors: s.A,
		First: time.UnixMilli(first).UTC(), Last: time.UnixMilli(last).UTC(), Seen: unseen == 0, Read: unread == 0}, nil
}

// Counts returns how many of user's groups are unseen and unread: two
// ZCARDs in one transaction, O(1).
func (f *Feed) Counts(ctx context.Context, user string) (_ Counts, err error) {
	ctx, call := f.obs.counts.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(user); err != nil {
		return Counts{}, err
	}
	ks := f.keys(user)
	var unseen, unread *redis.IntCmd
	if _, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		unseen, unread = p.ZCard(ctx, ks.unseen), p.ZCard(ctx, ks.unread)
		return nil
	}); err != nil {
		return Counts{}, fmt.Errorf("notify: counts: %w", err)
	}
	return Counts{Unseen: unseen.Val(), Unread: unread.Val()}, nil
}

// MarkSeen marks user's groups seen — those given, or every group when
// none is — and returns the counts after, read by the same script. Ids of
// no group (never made, or dropped by Cap meanwhile) are ignored; a
// malformed id is ErrInvalid and marks nothing. A group that takes a new
// activity afterwards is unseen again.
func (f *Feed) MarkSeen(ctx context.Context, user string, groupIDs ...string) (_ Counts, err error) {
	ctx, call := f.obs.markSeen.Start(ctx)
	defer func() { err = call.End(err) }()
	return f.mark(ctx, "seen", user, groupIDs)
}

// MarkRead is MarkSeen for read: a group read is seen too, and a group
// that takes a new activity afterwards is unread (and unseen) again.
func (f *Feed) MarkRead(ctx context.Context, user string, groupIDs ...string) (_ Counts, err error) {
	ctx, call := f.obs.markRead.Start(ctx)
	defer func() { err = call.End(err) }()
	return f.mark(ctx, "read", user, groupIDs)
}

func (f *Feed) mark(ctx context.Context, what, user string, ids []string) (Counts, error) {
	if err := validUser(user); err != nil {
		return Counts{}, err
	}
	if len(ids) > MaxMark {
		return Counts{}, fmt.Errorf("%w: %d group ids (at most %d)", ErrInvalid, len(ids), MaxMark)
	}
	args := make([]any, 1, 1+len(ids))
	args[0] = what
	for _, id := range ids {
		if _, _, _, ok := parseGroupID(id); !ok {
			return Counts{}, fmt.Errorf("%w: group id %.80q", ErrInvalid, id)
		}
		args = append(args, id)
	}
	ks := f.keys(user)
	res, err := markScript.Run(ctx, f.rdb, []string{ks.unseen, ks.unread}, args...).Int64Slice()
	if err != nil || len(res) != 2 {
		return Counts{}, fmt.Errorf("notify: mark %s: %v %w", what, res, err)
	}
	return Counts{Unseen: res[0], Unread: res[1]}, nil
}

// A cursor is base64url of a version byte and the update sequence number
// of the last group shown. It carries nothing secret: a forged one that
// decodes is only a place to start from.
const cursorVersion = 1

var cursorEncoding = base64.RawURLEncoding.Strict()

func encodeCursor(seq int64) string {
	b := make([]byte, 9)
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:], uint64(seq))
	return cursorEncoding.EncodeToString(b)
}

func decodeCursor(c string) (int64, error) {
	b, err := cursorEncoding.DecodeString(c)
	if err != nil || len(b) != 9 || b[0] != cursorVersion || strings.ContainsAny(c, "\r\n") {
		return 0, fmt.Errorf("%w: %.40q", ErrCursor, c)
	}
	seq := int64(binary.BigEndian.Uint64(b[1:]))
	if seq <= 0 || seq > 1<<53 {
		return 0, fmt.Errorf("%w: %.40q", ErrCursor, c)
	}
	return seq, nil
}
