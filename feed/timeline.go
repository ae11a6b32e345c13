package feed

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// marker is the member that marks an inbox or a following set as present.
const marker = "~"

var (
	//go:embed read.lua
	readLua    string
	readScript = redis.NewScript(readLua)
	//go:embed open.lua
	openLua    string
	openScript = redis.NewScript(openLua)
	//go:embed fill.lua
	fillLua    string
	fillScript = redis.NewScript(fillLua)
	//go:embed following.lua
	followingLua    string
	followingScript = redis.NewScript(followingLua)
)

// Page is one page of a timeline.
type Page struct {
	Posts []Post `json:"posts"`
	// Next is the cursor of the following page; "" at the end.
	Next string `json:"next,omitempty"`
}

// MaxPage is the most posts one Timeline call returns.
const MaxPage = 100

// entry is one candidate post of a timeline.
type entry struct {
	id    string // decimal, as stored in Redis
	score int64
	inbox bool // came from the reader's inbox
}

// before reports whether a comes before b in a timeline (newer first).
func before(a, b entry) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return len(a.id) > len(b.id) || len(a.id) == len(b.id) && a.id > b.id
}

// Timeline returns up to limit posts for reader, newest first, after cursor
// ("" for the newest). It merges the reader's inbox (pushed posts) with the
// outboxes of the celebrities they follow (pulled), hydrates the posts in
// one batched read, and shows only live posts by accounts the reader
// follows now. The next page's cursor is a (score, id) position, so posts
// published meanwhile never shift it. A reader without an inbox (new, or
// inactive for ActivePeriod) gets one rebuilt from their followees'
// outboxes; every read keeps the reader active.
func (s *Service) Timeline(ctx context.Context, reader, cursor string, limit int) (_ Page, err error) {
	ctx, call := s.obs.timeline.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(reader); err != nil {
		return Page{}, err
	}
	if limit < 1 || limit > MaxPage {
		return Page{}, fmt.Errorf("%w: limit %d (1..%d)", ErrInvalid, limit, MaxPage)
	}
	var pos position
	if cursor != "" {
		var err error
		if pos, err = s.cursors.decode(reader, cursor); err != nil {
			return Page{}, err
		}
	}
	reg, err := s.celebrities(ctx)
	if err != nil {
		return Page{}, err
	}
	var page Page
	fetch := limit + limit/4 + 2
	for round := 0; round < 8 && len(page.Posts) < limit; round++ {
		cands, following, more, err := s.candidates(ctx, reader, pos, fetch, reg)
		if err != nil {
			return Page{}, err
		}
		ids := make([]int64, len(cands))
		for i, c := range cands {
			ids[i], _ = strconv.ParseInt(c.id, 10, 64)
		}
		posts, err := s.hydrate(ctx, ids)
		if err != nil {
			return Page{}, err
		}
		var stale []any
		progressed := false
		for i, c := range cands {
			p := posts[ids[i]]
			pos, progressed = position{score: c.score, id: ids[i]}, true
			switch {
			case p == nil || p.Deleted:
				if c.inbox {
					stale = append(stale, c.id)
				}
				continue
			case !following[p.Author]:
				continue
			}
			page.Posts = append(page.Posts, *p)
			if len(page.Posts) == limit {
				break
			}
		}
		if len(stale) > 0 { // lazy removal; the next read retries a failure
			s.rdb.ZRem(ctx, s.userKey(reader, "inbox"), stale...)
		}
		if len(page.Posts) == limit {
			if more || pos != (position{cands[len(cands)-1].score, ids[len(ids)-1]}) {
				page.Next = s.cursors.encode(reader, pos)
			}
			return page, nil
		}
		if !more {
			return page, nil
		}
		if !progressed {
			fetch *= 2
		}
	}
	if pos.score > 0 { // many hidden posts in a row: let the caller go on
		page.Next = s.cursors.encode(reader, pos)
	}
	return page, nil
}

// candidates returns, in timeline order, the posts after pos that are
// certainly the next ones: up to fetch from the inbox and from each followed
// celebrity's outbox, merged, deduplicated, cut where a source that had
// more stops and then to fetch entries. It also returns the reader's
// followees and whether there is more.
func (s *Service) candidates(ctx context.Context, reader string, pos position, fetch int, reg map[string]int64) ([]entry, map[string]bool, bool, error) {
	inbox, following, err := s.readInbox(ctx, reader, pos, fetch)
	if err != nil {
		return nil, nil, false, err
	}
	var celebs []string
	for f := range following {
		if _, ok := reg[f]; ok {
			celebs = append(celebs, f)
		}
	}
	sources := [][]entry{inbox}
	if len(celebs) > 0 {
		max := "+inf"
		if pos.score > 0 {
			max = strconv.FormatInt(pos.score, 10)
		}
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.ZSliceCmd, len(celebs))
		for i, c := range celebs {
			cmds[i] = pipe.ZRevRangeByScoreWithScores(ctx, s.userKey(c, "outbox"), &redis.ZRangeBy{Max: max, Min: "-inf", Count: int64(fetch)})
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, false, fmt.Errorf("feed: read celebrity outboxes: %w", err)
		}
		for _, cmd := range cmds {
			var es []entry
			for _, z := range cmd.Val() {
				id, _ := z.Member.(string)
				es = append(es, entry{id: id, score: int64(z.Score)})
			}
			sources = append(sources, es)
		}
	}
	// A source that returned fetch entries may hold more: the merge is
	// exact only down to the earliest last entry among those.
	var bound *entry
	for _, src := range sources {
		if len(src) == fetch {
			last := src[len(src)-1]
			if bound == nil || before(last, *bound) {
				bound = &last
			}
		}
	}
	after := entry{id: strconv.FormatInt(pos.id, 10), score: pos.score}
	n := 0
	for _, src := range sources {
		n += len(src)
	}
	out := make([]entry, 0, n)
	for _, src := range sources {
		for _, e := range src {
			if (pos.score > 0 && !before(after, e)) || (bound != nil && before(*bound, e)) {
				continue
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b entry) int {
		if a.id == b.id {
			return 0
		}
		if before(a, b) {
			return -1
		}
		return 1
	})
	// A post in several sources has the same score in each, so its copies
	// are adjacent; keep one, remembering whether the inbox held it.
	k := 0
	for i, e := range out {
		if i > 0 && e.id == out[k-1].id {
			out[k-1].inbox = out[k-1].inbox || e.inbox
			continue
		}
		out[k] = e
		k++
	}
	out = out[:k]
	// Only the first fetch are needed this round: hydrating more is waste.
	more := bound != nil
	if len(out) > fetch {
		out, more = out[:fetch], true
	}
	return out, following, more, nil
}

// readInbox returns up to fetch inbox entries at or below pos's score and the
// reader's followees, rebuilding either from SQL when Redis lacks it.
func (s *Service) readInbox(ctx context.Context, reader string, pos position, fetch int) ([]entry, map[string]bool, error) {
	max := "+inf"
	if pos.score > 0 {
		max = strconv.FormatInt(pos.score, 10)
	}
	ks := []string{s.userKey(reader, "inbox"), s.userKey(reader, "following"), s.userKey(reader, "pushed")}
	for attempt := 0; ; attempt++ {
		res, err := readScript.Run(ctx, s.rdb, ks, max, fetch, s.cfg.ActivePeriod.Milliseconds(), s.cfg.InboxCap, s.cfg.InboxSlack).Slice()
		if err != nil {
			return nil, nil, fmt.Errorf("feed: read inbox: %w", err)
		}
		state, _ := res[0].(int64)
		have, _ := res[1].(int64)
		if state == 2 && have == 1 {
			return parseInbox(res[2]), parseFollowing(res[3]), nil
		}
		if attempt == 3 {
			return nil, nil, fmt.Errorf("feed: inbox of %s keeps changing while it is rebuilt", reader)
		}
		if have == 0 {
			if err := s.rebuildFollowing(ctx, reader); err != nil {
				return nil, nil, err
			}
		}
		if state != 2 {
			if err := s.rebuildInbox(ctx, reader); err != nil {
				return nil, nil, err
			}
		}
	}
}

func parseInbox(v any) []entry {
	flat, _ := v.([]any)
	out := make([]entry, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		id, _ := flat[i].(string)
		sc, _ := flat[i+1].(string)
		score, _ := strconv.ParseInt(sc, 10, 64)
		out = append(out, entry{id: id, score: score, inbox: true})
	}
	return out
}

func parseFollowing(v any) map[string]bool {
	flat, _ := v.([]any)
	out := make(map[string]bool, len(flat))
	for _, m := range flat {
		if f, _ := m.(string); f != marker {
			out[f] = true
		}
	}
	return out
}

// followees reads every account reader follows from SQL.
func (s *Service) followees(ctx context.Context, reader string) ([]string, error) {
	var all []string
	after := ""
	for {
		page, err := s.followeesPage(ctx, reader, after, 10_000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < 10_000 {
			return all, nil
		}
		after = page[len(page)-1]
	}
}

// rebuildFollowing caches reader's followees from SQL, unless a follow or
// unfollow moved the generation meanwhile (the caller reads again).
func (s *Service) rebuildFollowing(ctx context.Context, reader string) error {
	gen, err := s.rdb.Get(ctx, s.userKey(reader, "gen")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("feed: read generation: %w", err)
	}
	fs, err := s.followees(ctx, reader)
	if err != nil {
		return err
	}
	args := []any{gen, s.cfg.ActivePeriod.Milliseconds()}
	for _, f := range fs {
		args = append(args, f)
	}
	if err := followingScript.Run(ctx, s.rdb, []string{s.userKey(reader, "following"), s.userKey(reader, "gen")}, args...).Err(); err != nil {
		return fmt.Errorf("feed: cache followees: %w", err)
	}
	return nil
}

// rebuildInbox opens reader's inbox — from then on fan-out pushes to it —
// then fills it with the newest posts of the non-celebrity accounts they
// follow, from their outboxes (celebrities are pulled at read anyway). A
// post published between the two steps is either in an outbox when it is
// read or pushed after the inbox opened, so none is missed. Each followee
// gives at most max(20, 4×InboxCap/followees) posts.
func (s *Service) rebuildInbox(ctx context.Context, reader string) error {
	inbox := s.userKey(reader, "inbox")
	if err := openScript.Run(ctx, s.rdb, []string{inbox, s.userKey(reader, "pushed")}, s.cfg.ActivePeriod.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("feed: open inbox: %w", err)
	}
	fs, err := s.followees(ctx, reader)
	if err != nil {
		return err
	}
	reg, err := s.celebrities(ctx)
	if err != nil {
		return err
	}
	var authors []string
	for _, f := range fs {
		if _, celeb := reg[f]; !celeb {
			authors = append(authors, f)
		}
	}
	per := int64(min(s.cfg.OutboxCap, s.cfg.InboxCap, max(20, 4*s.cfg.InboxCap/max(1, len(authors)))))
	var all []redis.Z
	for start := 0; start < len(authors); start += 500 {
		pipe := s.rdb.Pipeline()
		var cmds []*redis.ZSliceCmd
		for _, a := range authors[start:min(start+500, len(authors))] {
			cmds = append(cmds, pipe.ZRevRangeWithScores(ctx, s.userKey(a, "outbox"), 0, per-1))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("feed: read outboxes: %w", err)
		}
		for _, c := range cmds {
			all = append(all, c.Val()...)
		}
	}
	slices.SortFunc(all, func(a, b redis.Z) int {
		if a.Score > b.Score {
			return -1
		}
		if a.Score < b.Score {
			return 1
		}
		return 0
	})
	all = all[:min(len(all), s.cfg.InboxCap)]
	args := []any{s.cfg.InboxCap, s.cfg.InboxSlack, 1}
	for _, z := range all {
		args = append(args, int64(z.Score), z.Member)
	}
	if err := fillScript.Run(ctx, s.rdb, []string{inbox}, args...).Err(); err != nil {
		return fmt.Errorf("feed: fill inbox: %w", err)
	}
	return nil
}
