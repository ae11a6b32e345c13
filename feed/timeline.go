package feed

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
// follows now and has not muted (Mute). The next page's cursor is a (score, id) position, so posts
// published meanwhile never shift it. A reader without an inbox (new, or
// inactive for ActivePeriod) gets one rebuilt from their followees'
// outboxes, as does one whose inbox Activate opened (merged with what was
// pushed since); every read keeps the reader active.
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
		cands, posts, g, more, err := s.candidates(ctx, reader, pos, fetch, reg)
		if err != nil {
			return Page{}, err
		}
		ids := make([]int64, len(cands))
		for i, c := range cands {
			ids[i], _ = strconv.ParseInt(c.id, 10, 64)
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
			case !g.following[p.Author] || g.muted[p.Author]:
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
// more stops and then to fetch entries; and the posts read to order them
// (nil for a post that does not exist). It also returns the reader's
// followees and mutes, and whether there is more. Muted celebrities are not
// pulled.
func (s *Service) candidates(ctx context.Context, reader string, pos position, fetch int, reg map[string]int64) ([]entry, map[int64]*Post, view, bool, error) {
	max := "+inf"
	if pos.score > 0 {
		max = strconv.FormatInt(pos.score, 10)
	}
	inbox, pending, g, celebs, outboxes, err := s.readKept(ctx, reader, max, fetch, reg)
	if err != nil {
		return nil, nil, view{}, false, err
	}
	if inbox == nil {
		if inbox, g, err = s.readInbox(ctx, reader, max, fetch); err != nil {
			return nil, nil, view{}, false, err
		}
		if c := g.pulled(reg); outboxes == nil || !slices.Equal(c, celebs) {
			celebs, outboxes = c, nil
			if len(celebs) > 0 {
				if outboxes, err = s.pull(ctx, celebs, max, fetch); err != nil {
					return nil, nil, view{}, false, err
				}
			}
		}
	}
	// The pushes not yet moved into the inbox are a source of their own, read
	// whole (and looked up in the inbox if their post is gone: they are not
	// there yet, so they are left out, as the post would be).
	sources := append([][]entry{inbox, pending}, outboxes...)
	keys := []string{s.userKey(reader, "inbox"), s.userKey(reader, "inbox")}
	for _, c := range celebs {
		keys = append(keys, s.userKey(c, "outbox"))
	}
	// A source that returned fetch entries may hold more: the merge is
	// exact only down to the earliest last entry among those. (An entry
	// removed from its source meanwhile is left out by scoreSources; the
	// source's cut is then its last remaining entry, earlier, or — none
	// left — pos itself.)
	full := make([]bool, len(sources))
	for i, src := range sources {
		full[i] = len(src) == fetch && i != 1
	}
	posts, err := s.scoreSources(ctx, sources, keys)
	if err != nil {
		return nil, nil, view{}, false, err
	}
	after := entry{id: strconv.FormatInt(pos.id, 10), score: pos.score}
	var bound *entry
	for i, src := range sources {
		if !full[i] {
			continue
		}
		last := after
		if len(src) > 0 {
			last = src[len(src)-1]
		}
		if bound == nil || before(last, *bound) {
			bound = &last
		}
	}
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
	return out, posts, g, more, nil
}

// pull reads the newest fetch ids at or below max of each celebrity's
// outbox (see pullRead), in one pipeline and, for heads whose token
// changed, a second.
func (s *Service) pull(ctx context.Context, celebs []string, max string, fetch int) ([][]entry, error) {
	r := s.newPullRead(celebs, max, fetch, time.Now())
	pipe := s.rdb.Pipeline()
	r.queue(ctx, pipe)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("feed: read celebrity outboxes: %w", err)
	}
	return r.finish(ctx)
}

// pullRead is a read of celebrities' outbox heads, queued on a pipeline
// (queue) and completed after it ran (finish): for a first page (max
// "+inf") with the head kept in memory (pulls), only the outbox's version
// token, and the ids kept when it has not changed; otherwise the token,
// then the ids (kept for the next page). Heads whose token changed are
// read again by finish, in a second pipeline.
type pullRead struct {
	s      *Service
	celebs []string
	max    string
	fetch  int
	now    time.Time
	kept   []pulled // heads kept, for celebs[keptAt[k]]
	keptAt []int
	lead   int                // keys read before the kept heads' tokens
	tokens tokenReads         // the lead keys, then the kept heads' tokens
	todo   []int              // celebs whose ids are read
	toks   []*redis.StringCmd // per todo: the token read before the ids (first pages)
	ranges []*redis.StringSliceCmd
}

func (s *Service) newPullRead(celebs []string, max string, fetch int, now time.Time) *pullRead {
	r := &pullRead{s: s, celebs: celebs, max: max, fetch: fetch, now: now}
	first := max == "+inf"
	for i, c := range celebs {
		if p, ok := s.pulls.get(c, now); first && ok && p.serves(fetch) {
			r.kept, r.keptAt = append(r.kept, p), append(r.keptAt, i)
		} else {
			r.todo = append(r.todo, i)
		}
	}
	return r
}

// queue adds the read's commands to pipe, reading the lead keys' values
// with the kept heads' tokens (see leadValue).
func (r *pullRead) queue(ctx context.Context, pipe redis.Pipeliner, lead ...string) {
	keys := lead
	for k := range r.kept {
		keys = append(keys, r.s.userKey(r.celebs[r.keptAt[k]], "outver"))
	}
	r.lead, r.tokens = len(lead), r.s.readTokens(ctx, pipe, keys)
	r.queueIDs(ctx, pipe)
}

// leadValue is the value of queue's lead key i ("" when missing).
func (r *pullRead) leadValue(i int) (string, error) { return r.tokens.value(i) }

// queueIDs adds the reads of the todo heads' ids to pipe.
func (r *pullRead) queueIDs(ctx context.Context, pipe redis.Pipeliner) {
	r.toks, r.ranges = r.toks[:0], make([]*redis.StringSliceCmd, len(r.todo))
	for k, i := range r.todo {
		if r.max == "+inf" && r.s.pulls != nil {
			// the token first: ids read after it are at least as new
			r.toks = append(r.toks, pipe.Get(ctx, r.s.userKey(r.celebs[i], "outver")))
		}
		r.ranges[k] = pipe.ZRevRangeByScore(ctx, r.s.userKey(r.celebs[i], "outbox"), &redis.ZRangeBy{Max: r.max, Min: "-inf", Count: int64(r.fetch)})
	}
}

// finish returns each celebrity's ids once the queued commands ran,
// reading the heads whose token changed.
func (r *pullRead) finish(ctx context.Context) ([][]entry, error) {
	out := make([][]entry, len(r.celebs))
	if err := r.take(out); err != nil {
		return nil, err
	}
	var changed []int
	for k, p := range r.kept {
		tok, err := r.tokens.value(r.lead + k)
		if err != nil {
			return nil, fmt.Errorf("feed: read celebrity outbox versions: %w", err)
		}
		if tok != "" && tok == p.token {
			out[r.keptAt[k]] = entries(p.ids[:min(r.fetch, len(p.ids))])
		} else {
			changed = append(changed, r.keptAt[k])
		}
	}
	if len(changed) == 0 {
		return out, nil
	}
	r.kept, r.todo = nil, changed
	pipe := r.s.rdb.Pipeline()
	r.queueIDs(ctx, pipe)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("feed: read celebrity outboxes: %w", err)
	}
	return out, r.take(out)
}

// take sets out's entries of the todo heads from their replies, keeping
// each head read after its token.
func (r *pullRead) take(out [][]entry) error {
	for k, i := range r.todo {
		if err := r.ranges[k].Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("feed: read celebrity outboxes: %w", err)
		}
		ids := r.ranges[k].Val()
		out[i] = entries(ids)
		if len(r.toks) > 0 {
			if tok, _ := r.toks[k].Result(); tok != "" {
				r.s.pulls.put(r.celebs[i], pulled{token: tok, ids: ids, asked: r.fetch}, r.now)
			}
		}
	}
	return nil
}

// tokenReads are reads of string values (tokens) in a pipeline: one MGET
// on a single node, else a GET each (a cluster spreads them over slots).
type tokenReads struct {
	all  *redis.SliceCmd
	each []*redis.StringCmd
}

func (s *Service) readTokens(ctx context.Context, pipe redis.Pipeliner, keys []string) tokenReads {
	if _, single := s.rdb.(*redis.Client); single && len(keys) > 1 {
		return tokenReads{all: pipe.MGet(ctx, keys...)}
	}
	t := tokenReads{each: make([]*redis.StringCmd, len(keys))}
	for i, k := range keys {
		t.each[i] = pipe.Get(ctx, k)
	}
	return t
}

// value is key i's value, "" when it is missing.
func (t tokenReads) value(i int) (string, error) {
	if t.all != nil {
		if err := t.all.Err(); err != nil {
			return "", err
		}
		v, _ := t.all.Val()[i].(string)
		return v, nil
	}
	v, err := t.each[i].Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// entries are ids read from a source, unscored.
func entries(ids []string) []entry {
	es := make([]entry, len(ids))
	for j, id := range ids {
		es[j] = entry{id: id}
	}
	return es
}

// scoreSources gives each entry of sources (in the order each source was
// read, keys[i] holding sources[i]) its score: the post's own, which is the
// one it was stored with, read through the post caches that the page reads
// anyway; only a post that does not exist has its score read from its
// source, with ZSCORE. An entry removed from its source meanwhile is left
// out. Reading ids without scores saves Redis most of a page's cost: Redis
// 7.0 formats each score of a WITHSCORES reply with snprintf, measured at
// 21 µs for 27 scores against 4 µs for the 27 ids alone.
func (s *Service) scoreSources(ctx context.Context, sources [][]entry, keys []string) (map[int64]*Post, error) {
	var ids []int64
	for _, src := range sources {
		for _, e := range src {
			id, _ := strconv.ParseInt(e.id, 10, 64)
			ids = append(ids, id)
		}
	}
	posts, err := s.hydrate(ctx, ids)
	if err != nil {
		return nil, err
	}
	type unknown struct{ src, at int }
	var lost []unknown
	var pipe redis.Pipeliner
	var cmds []*redis.FloatCmd
	for i, src := range sources {
		for j := range src {
			id, _ := strconv.ParseInt(src[j].id, 10, 64)
			if p := posts[id]; p != nil {
				src[j].score = p.Score
				continue
			}
			if pipe == nil {
				pipe = s.rdb.Pipeline()
			}
			lost = append(lost, unknown{i, j})
			cmds = append(cmds, pipe.ZScore(ctx, keys[i], src[j].id))
		}
	}
	if pipe == nil {
		return posts, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("feed: read the scores of missing posts: %w", err)
	}
	gone := map[unknown]bool{}
	for k, u := range lost {
		if sc, err := cmds[k].Result(); err == nil {
			sources[u.src][u.at].score = int64(sc)
		} else {
			gone[u] = true
		}
	}
	for i, src := range sources {
		kept := src[:0]
		for j, e := range src {
			if !gone[unknown{i, j}] {
				kept = append(kept, e)
			}
		}
		sources[i] = kept
	}
	return posts, nil
}

// view is what a reader's timeline is filtered by: the accounts they follow
// and the ones they muted.
type view struct{ following, muted map[string]bool }

// pulled returns the followed, unmuted celebrities of reg, in order.
func (g view) pulled(reg map[string]int64) []string {
	var celebs []string
	for f := range g.following {
		if _, ok := reg[f]; ok && !g.muted[f] {
			celebs = append(celebs, f)
		}
	}
	slices.Sort(celebs)
	return celebs
}

// maxPending is the most pushes a page reads from the pushed list beside
// the inbox, unmoved; a longer list is moved into the inbox (read.lua).
const maxPending = 32

// readKept is a page's read in one round trip for a reader whose view this
// process keeps: read.lua's reads as plain commands, which cost Redis a
// fraction of a script call, pipelined with the view token and the pulled
// celebrities' heads. It serves the page in read.lua's steady state — the
// inbox built, its lifetime not due for renewal, the view token unchanged
// — and when up to maxPending posts were pushed since: those are returned
// as pending, a source of the page beside the inbox, and stay in the
// pushed list until a read runs read.lua (their scores are the posts'
// own, and duplicates collapse in the merge as in the inbox). Otherwise it
// returns a nil inbox and the caller runs read.lua; the heads read are
// returned all the same when the view held (the script then only has
// pushes to move or keys to renew), for the caller to use if the script's
// view agrees.
//
// The reads are not one transaction, and need not be: the token is read
// after the inbox, so a token unchanged means no follow, unfollow, block
// or mute happened before the inbox was read (each drops it); the pushed
// list is read before the inbox, so pushes another read moves in between
// are in both (and collapse), never in neither; a push appended after the
// list was read is one a page read a moment earlier would miss too. The
// inbox does not expire in between (it has at least 63/64 of ActivePeriod
// to live); one evicted and rebuilt in between (maxmemory) gives a page of
// the rebuilt inbox and the pushes read before it, all posts of accounts
// the reader follows.
//
// The reads are all read-only commands, which a cluster client set to
// read from replicas (ReadOnly, RouteByLatency, RouteRandomly) would send
// there, where a dropped token may still be seen: such a client reads
// through read.lua always (a script goes to the primary).
func (s *Service) readKept(ctx context.Context, reader, max string, fetch int, reg map[string]int64) (inbox, pending []entry, g view, celebs []string, outboxes [][]entry, err error) {
	now := time.Now()
	kv, ok := s.views.get(reader, now)
	if !ok || !s.readsPrimaries {
		return nil, nil, view{}, nil, nil, nil
	}
	g = kv.v
	celebs = g.pulled(reg)
	ik := s.userKey(reader, "inbox")
	pipe := s.rdb.Pipeline()
	pushed := pipe.LRange(ctx, s.userKey(reader, "pushed"), 0, maxPending+1) // the marker, then up to maxPending+1 pushes
	ids := pipe.ZRevRangeByScore(ctx, ik, &redis.ZRangeBy{Max: max, Min: "(0", Count: int64(fetch)})
	state := pipe.ZScore(ctx, ik, marker)
	life := pipe.PTTL(ctx, ik)
	heads := s.newPullRead(celebs, max, fetch, now)
	heads.queue(ctx, pipe, s.userKey(reader, "viewtok"))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, view{}, nil, nil, fmt.Errorf("feed: read inbox: %w", err)
	}
	for _, c := range []redis.Cmder{pushed, life, ids} { // Exec gave the first error only
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, view{}, nil, nil, fmt.Errorf("feed: read inbox: %w", err)
		}
	}
	if tok, err := heads.leadValue(0); err != nil || tok != kv.token {
		return nil, nil, view{}, nil, nil, err // the view changed: read it again, and the heads of its celebrities
	}
	if outboxes, err = heads.finish(ctx); err != nil {
		return nil, nil, view{}, nil, nil, err
	}
	period := s.cfg.ActivePeriod
	p := pushed.Val()
	// A pushed list without its marker first was trimmed by a push (the
	// marker went with the oldest pushes): read.lua moves what is left.
	if len(p) == 0 || len(p) > 1+maxPending || p[0] != marker || state.Err() != nil || state.Val() != 0 || life.Val() < period-period/64 {
		return nil, nil, g, celebs, outboxes, nil
	}
	inbox = make([]entry, 0, len(ids.Val()))
	for _, id := range ids.Val() {
		inbox = append(inbox, entry{id: id, inbox: true})
	}
	for _, v := range p[1:] {
		if id, ok := pushedID(v); ok {
			pending = append(pending, entry{id: id})
		}
	}
	return inbox, pending, g, celebs, outboxes, nil
}

// pushedID is the post id of a pushed list's entry, "score:id" with both
// decimal (read.lua's pattern, which skips anything else).
func pushedID(v string) (string, bool) {
	score, id, ok := strings.Cut(v, ":")
	return id, ok && decimal(score) && decimal(id)
}

func decimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// readInbox returns up to fetch inbox entries at or below max and the
// reader's followees and mutes, rebuilding any from SQL when Redis lacks it.
func (s *Service) readInbox(ctx context.Context, reader, max string, fetch int) ([]entry, view, error) {
	ks := []string{s.userKey(reader, "inbox"), s.userKey(reader, "following"), s.userKey(reader, "pushed"), s.userKey(reader, "muted"), s.userKey(reader, "viewtok")}
	for attempt := 0; ; attempt++ {
		now := time.Now()
		kept, ok := s.views.get(reader, now)
		held, fresh := "", ""
		if ok {
			held = kept.token
		}
		if s.views != nil {
			fresh = newToken()
		}
		res, err := readScript.Run(ctx, s.rdb, ks, max, fetch, s.cfg.ActivePeriod.Milliseconds(), s.cfg.InboxCap, s.cfg.InboxSlack, held, fresh).Slice()
		if err != nil {
			return nil, view{}, fmt.Errorf("feed: read inbox: %w", err)
		}
		state, _ := res[0].(int64)
		have, _ := res[1].(int64)
		haveMuted, _ := res[4].(int64)
		var g view
		if have == 2 && held != "" {
			g, have, haveMuted = kept.v, 1, 1
		} else {
			g = view{following: parseSet(res[3]), muted: parseSet(res[5])}
			if have == 1 && haveMuted == 1 {
				if tok, _ := res[6].(string); tok != "" {
					s.views.put(reader, keptView{token: tok, v: g}, now)
				} else {
					s.views.drop(reader)
				}
			}
		}
		if state == 2 && have == 1 && haveMuted == 1 {
			return parseInbox(res[2]), g, nil
		}
		if attempt == 3 {
			return nil, view{}, fmt.Errorf("feed: inbox of %s keeps changing while it is rebuilt", reader)
		}
		// A set missing from Redis is read from SQL, and that read serves
		// this call whether or not it could be cached (a follow or mute
		// racing the fill leaves it for the next read to cache): a reader
		// whose sets keep changing still reads.
		if have == 0 {
			if g.following, err = s.cacheSet(ctx, reader, "following", s.followees); err != nil {
				return nil, view{}, err
			}
		}
		if haveMuted == 0 {
			if g.muted, err = s.cacheSet(ctx, reader, "muted", s.mutedBy); err != nil {
				return nil, view{}, err
			}
		}
		if state == 2 {
			return parseInbox(res[2]), g, nil
		}
		if err := s.rebuildInbox(ctx, reader); err != nil {
			return nil, view{}, err
		}
	}
}

func parseInbox(v any) []entry {
	flat, _ := v.([]any)
	out := make([]entry, 0, len(flat))
	for _, m := range flat {
		id, _ := m.(string)
		out = append(out, entry{id: id, inbox: true})
	}
	return out
}

func parseSet(v any) map[string]bool {
	flat, _ := v.([]any)
	out := make(map[string]bool, len(flat))
	for _, m := range flat {
		if f, _ := m.(string); f != marker {
			out[f] = true
		}
	}
	return out
}
