package shortlink

import (
	"hash/maphash"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Dimension is what Breakdown groups a link's clicks by.
type Dimension string

// The dimensions a click is recorded under.
const (
	// DimReferrer is the Referer header's host in canonical form (lower
	// case, no port, no trailing dot); "(direct)" without one, "(invalid)"
	// for one that has no well-formed host.
	DimReferrer Dimension = "referrer"
	// DimDevice is the User-Agent's class: desktop, mobile, tablet, bot or
	// other (see Device).
	DimDevice Dimension = "device"
	// DimCountry is Config.Country's answer: an ISO 3166 alpha-2 code in
	// upper case, or "(unknown)".
	DimCountry Dimension = "country"
	// DimUTMSource, DimUTMMedium and DimUTMCampaign are the utm_source,
	// utm_medium and utm_campaign parameters of the link's destination URL
	// at the time of the click; "(none)" when it has none.
	DimUTMSource   Dimension = "utm_source"
	DimUTMMedium   Dimension = "utm_medium"
	DimUTMCampaign Dimension = "utm_campaign"
)

// dimensions in the order of their SQL number (1..6; 0 is a click's total).
var dimensions = [...]Dimension{DimReferrer, DimDevice, DimCountry, DimUTMSource, DimUTMMedium, DimUTMCampaign}

const numDims = len(dimensions)

// dimIndex is d's index in dimensions, or -1.
func dimIndex(d Dimension) int {
	for i, x := range dimensions {
		if x == d {
			return i
		}
	}
	return -1
}

// The values recorded in place of a missing or refused one. Parentheses
// appear in no host, country code or device class, so only a UTM parameter
// can spell one of them (and mislabel its own link's clicks only).
const (
	ValueDirect  = "(direct)"  // no Referer
	ValueInvalid = "(invalid)" // a Referer without a well-formed host
	ValueUnknown = "(unknown)" // no country
	ValueNone    = "(none)"    // no such UTM parameter
	// ValueOther holds the clicks of the values past
	// Config.AnalyticsValues of one dimension of one link in one hour.
	ValueOther = "(other)"
)

// MaxValueLen bounds a recorded value, in bytes: a longer UTM parameter is
// cut (at a UTF-8 boundary), a longer referrer host is ValueInvalid.
const MaxValueLen = 64

// Device classes, DimDevice's values.
const (
	DeviceDesktop = "desktop"
	DeviceMobile  = "mobile"
	DeviceTablet  = "tablet"
	DeviceBot     = "bot"
	DeviceOther   = "other"
)

// botMarks, tabletMarks, mobileMarks and desktopMarks are tested in that
// order against the lower-cased User-Agent: the first list with a match
// names the class.
var (
	botMarks = []string{"bot", "crawl", "spider", "slurp", "preview", "facebookexternalhit", "headless",
		"curl/", "wget/", "python-", "go-http-client", "java/", "okhttp", "libwww", "httpclient", "scrapy", "monitor"}
	tabletMarks  = []string{"ipad", "tablet", "kindle", "silk/", "playbook"}
	mobileMarks  = []string{"mobi", "iphone", "ipod", "android", "windows phone", "blackberry", "opera mini"}
	desktopMarks = []string{"windows nt", "macintosh", "mac os x", "x11", "linux", "cros"}
)

// maxUALen is the part of a User-Agent the classifier reads.
const maxUALen = 512

// Device classifies a User-Agent header: bot (crawlers, link previews,
// HTTP libraries and command-line clients — "bot", "crawl", "spider",
// "curl/", "python-", … anywhere in it), tablet (iPad, Kindle, "tablet", or
// Android without "mobile"), mobile ("mobi", iPhone, Android, …), desktop
// (Windows NT, Macintosh, X11, Linux, ChromeOS) or other (empty or none of
// these). It reads the first 512 bytes, case-insensitively. A heuristic,
// not a registry: a client can claim any class.
func Device(userAgent string) string {
	if userAgent == "" {
		return DeviceOther
	}
	if len(userAgent) > maxUALen {
		userAgent = userAgent[:maxUALen]
	}
	ua := strings.ToLower(userAgent)
	switch {
	case containsAny(ua, botMarks):
		return DeviceBot
	case containsAny(ua, tabletMarks) || (strings.Contains(ua, "android") && !strings.Contains(ua, "mobile")):
		return DeviceTablet
	case containsAny(ua, mobileMarks):
		return DeviceMobile
	case containsAny(ua, desktopMarks):
		return DeviceDesktop
	}
	return DeviceOther
}

func containsAny(s string, marks []string) bool {
	for _, m := range marks {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// referrerHost returns the canonical host of a Referer header value, as
// links' hosts are compared (parseHost): Example.COM. and example.com:443
// are example.com. Only the part before the path is read, so a huge header
// costs no more than a short one.
func referrerHost(ref string) string {
	if ref == "" {
		return ValueDirect
	}
	_, rest, ok := strings.Cut(ref, "://")
	if !ok {
		return ValueInvalid
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if len(rest) > 2*MaxValueLen+8 { // room for userinfo and a port; the host is bounded below
		return ValueInvalid
	}
	u, err := url.Parse("http://" + rest)
	if err != nil || u.Hostname() == "" {
		return ValueInvalid
	}
	h, err := parseHost(u.Hostname())
	if err != nil || len(h.name) > MaxValueLen {
		return ValueInvalid
	}
	return h.name
}

// CountryFromHeaders is Config.Country's default: the CF-IPCountry header
// (set by Cloudflare), else X-Country (set by a proxy of the service's own),
// whichever is given first; see CountryCode for what is accepted. Trust it
// only behind a proxy that sets it: a client can send either header.
func CountryFromHeaders(r *http.Request) string {
	if c := header(r, "Cf-Ipcountry"); c != "" {
		return c
	}
	return header(r, "X-Country")
}

// header is r's header field canonicalKey (in net/textproto's canonical
// form), read without Header.Get's canonicalisation: a quarter of a
// click's recording cost when measured.
func header(r *http.Request, canonicalKey string) string {
	if v := r.Header[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// CountryCode returns c as a recorded country: two ASCII letters,
// upper-cased; anything else (Cloudflare's T1 for Tor, an empty or forged
// header) is ValueUnknown.
func CountryCode(c string) string {
	if len(c) != 2 || !isLetter(c[0]) || !isLetter(c[1]) {
		return ValueUnknown
	}
	return strings.ToUpper(c)
}

func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

// bounded cuts v to MaxValueLen bytes at a UTF-8 boundary; invalid UTF-8
// is replaced, as the value is stored as text.
func bounded(v string) string {
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	if len(v) <= MaxValueLen {
		return v
	}
	n := MaxValueLen
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}

// utm reads the UTM parameters of a destination URL; the parse is skipped
// for the URLs (nearly all) that have none.
func utm(dest string) [3]string {
	out := [3]string{ValueNone, ValueNone, ValueNone}
	if !strings.Contains(dest, "utm_") {
		return out
	}
	u, err := url.Parse(dest)
	if err != nil {
		return out
	}
	q := u.Query()
	for i, name := range [3]string{"utm_source", "utm_medium", "utm_campaign"} {
		if v := q.Get(name); v != "" {
			out[i] = bounded(v)
		}
	}
	return out
}

// click is what one counted redirect records, worked out before the
// rollup's lock is taken.
type click struct {
	code    string
	at      time.Time
	bot     bool
	values  [numDims]string
	visitor visitor // hashed at flush; zero for none
}

// newClick describes a click on l by r (nil for a Resolve without a
// request) from clientIP.
func (s *Service) newClick(l *Link, r *http.Request, clientIP string) click {
	c := click{code: s.keyOf(l), at: s.cfg.Now()}
	ref, ua, country := "", "", ""
	if r != nil {
		ref, ua = header(r, "Referer"), header(r, "User-Agent")
		country = s.cfg.Country(r)
	}
	a := s.analytics
	device := a.devices.get(ua)
	c.bot = device == DeviceBot
	m := a.utms.get(l.URL)
	c.values = [numDims]string{a.referrers.get(ref), device, CountryCode(country), m[0], m[1], m[2]}
	if clientIP != "" {
		c.visitor = visitor{clipped(clientIP, maxIPLen), clipped(ua, maxUALen)}
	}
	return c
}

// visitor is a client IP and User-Agent (their first maxIPLen and
// maxUALen bytes).
type visitor struct{ ip, ua string }

// maxIPLen is the part of a client IP kept (an IPv6 address with a zone
// is shorter).
const maxIPLen = 64

// clipped returns s's first n bytes as a string of their own, so that a huge
// header is not kept alive by its prefix until the next flush.
func clipped(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.Clone(s[:n])
}

// hourKey names one link's hour (Unix seconds of its start, UTC).
type hourKey struct {
	code string
	hour int64
}

// dayKey names one link's UTC day (Unix seconds of its start).
type dayKey struct {
	code string
	day  int64
}

// tally counts people (0) and bots (1).
type tally [2]int64

// hourRollup is one link's clicks in one hour: the total and, per
// dimension, per value (at most Config.AnalyticsValues values plus
// ValueOther).
type hourRollup struct {
	total  tally
	values [numDims]valueSet
}

// valueSet counts one dimension's values: a short list searched in order —
// most links meet a handful of values in an hour, and a scan of a few
// strings is faster than hashing one — indexed by a map once it holds more
// than smallValues.
type valueSet struct {
	list  []valueCount
	index map[string]int
}

type valueCount struct {
	value string
	t     tally
}

const smallValues = 8

// find returns v's index in the list, or -1.
func (vs *valueSet) find(v string) int {
	if vs.index != nil {
		if i, ok := vs.index[v]; ok {
			return i
		}
		return -1
	}
	for i := range vs.list {
		if vs.list[i].value == v {
			return i
		}
	}
	return -1
}

// insert adds v, not in the set, and returns its index.
func (vs *valueSet) insert(v string) int {
	vs.list = append(vs.list, valueCount{value: v})
	i := len(vs.list) - 1
	switch {
	case vs.index != nil:
		vs.index[v] = i
	case len(vs.list) > smallValues:
		vs.index = make(map[string]int, 2*len(vs.list))
		for j, vc := range vs.list {
			vs.index[vc.value] = j
		}
	}
	return i
}

// rollup is the clicks counted since the last cut.
type rollup struct {
	hours    map[hourKey]*hourRollup
	visitors map[dayKey]map[visitor]struct{}
}

func newRollup() rollup {
	return rollup{hours: map[hourKey]*hourRollup{}, visitors: map[dayKey]map[visitor]struct{}{}}
}

func (r rollup) empty() bool { return len(r.hours) == 0 && len(r.visitors) == 0 }

// maxVisitors bounds the distinct visitors of one link in one day kept
// between flushes; past it a visitor is not added to the day's uniques
// (counted in AnalyticsStats.VisitorsDropped). Uniques are an estimate
// (HyperLogLog, 0.81% standard error) and this bound is met only by more
// than 10,000 distinct visitors of one link within one FlushEvery.
const maxVisitors = 10_000

// AnalyticsStats are counters of the analytics rollup since New.
type AnalyticsStats struct {
	Clicks          int64 `json:"clicks"`           // clicks recorded
	Overflowed      int64 `json:"overflowed"`       // values recorded as ValueOther, past Config.AnalyticsValues
	VisitorsDropped int64 `json:"visitors_dropped"` // visitors not added to the uniques, past maxVisitors
	Flushed         int64 `json:"flushed"`          // batches written whole
	PartsReplayed   int64 `json:"parts_replayed"`   // parts of a batch found already committed (a lost reply)
	Dropped         int64 `json:"dropped"`          // batches given up after failing for maxBatchAge
}

// analytics is the in-memory rollup of clicks and its flusher.
type analytics struct {
	s         *Service
	maxValues int

	// The live rollup, striped by code so that concurrent redirects of
	// different links seldom wait for each other.
	seed    maphash.Seed
	stripes [analyticsStripes]stripe

	mu    sync.Mutex     // guards stats
	stats AnalyticsStats // the flushes' counters; the stripes count clicks

	flushMu sync.Mutex // one flush at a time; guards pending and pruned
	pending *batch     // a batch with parts not yet written, retried as it is
	pruned  map[int]time.Time
	// Memos of the classifiers: most clicks repeat a User-Agent, a
	// Referer and a destination seen a moment before.
	devices, referrers *memo[string]
	utms               *memo[[3]string]

	afterWrite func(shard int) error // test hook: fails a part after its commit, as a lost reply does
	lastCut    cutSize               // for the benchmarks

	stop chan struct{}
	done chan struct{}
}

func newAnalytics(s *Service) *analytics {
	a := &analytics{s: s, maxValues: s.cfg.AnalyticsValues, seed: maphash.MakeSeed(), pruned: map[int]time.Time{},
		devices: newMemo(Device), referrers: newMemo(referrerHost), utms: newMemo(utm),
		stop: make(chan struct{}), done: make(chan struct{})}
	for i := range a.stripes {
		a.stripes[i].live = newRollup()
	}
	go a.run()
	return a
}

const analyticsStripes = 16

// stripe is the live rollup of the codes that hash to it.
type stripe struct {
	mu    sync.Mutex // guards live and stats
	live  rollup
	stats AnalyticsStats // Clicks, Overflowed, VisitorsDropped
	_     [64]byte       // keeps stripes' locks off one cache line
}

func (a *analytics) stripe(code string) *stripe {
	return &a.stripes[maphash.String(a.seed, code)%analyticsStripes]
}

// add records c: a few map updates under its stripe's lock, no I/O.
func (a *analytics) add(c click) {
	hour := c.at.Truncate(time.Hour).Unix() // Truncate counts from the zero time: UTC hours
	bot := 0
	if c.bot {
		bot = 1
	}
	st := a.stripe(c.code)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.stats.Clicks++
	k := hourKey{c.code, hour}
	h := st.live.hours[k]
	if h == nil {
		h = &hourRollup{}
		st.live.hours[k] = h
	}
	h.total[bot]++
	for i, v := range c.values {
		set := &h.values[i]
		j := set.find(v)
		if j < 0 && len(set.list) >= a.maxValues {
			st.stats.Overflowed++
			v = ValueOther
			j = set.find(v)
		}
		if j < 0 {
			j = set.insert(v)
		}
		set.list[j].t[bot]++
	}
	if c.visitor.ip == "" || c.bot {
		return
	}
	d := dayKey{c.code, c.at.Truncate(24 * time.Hour).Unix()}
	vs := st.live.visitors[d]
	if vs == nil {
		vs = map[visitor]struct{}{}
		st.live.visitors[d] = vs
	}
	if _, ok := vs[c.visitor]; !ok {
		if len(vs) >= maxVisitors {
			st.stats.VisitorsDropped++
			return
		}
		vs[c.visitor] = struct{}{}
	}
}

// drop forgets the counts of a deleted link not yet cut into a batch.
func (a *analytics) drop(code string) {
	st := a.stripe(code)
	st.mu.Lock()
	defer st.mu.Unlock()
	for k := range st.live.hours {
		if k.code == code {
			delete(st.live.hours, k)
		}
	}
	for k := range st.live.visitors {
		if k.code == code {
			delete(st.live.visitors, k)
		}
	}
}

// AnalyticsStats returns the analytics rollup's counters (zero with
// Config.NoAnalytics).
func (s *Service) AnalyticsStats() AnalyticsStats {
	if s.analytics == nil {
		return AnalyticsStats{}
	}
	a := s.analytics
	a.mu.Lock()
	st := a.stats
	a.mu.Unlock()
	for i := range a.stripes {
		sp := &a.stripes[i]
		sp.mu.Lock()
		st.Clicks += sp.stats.Clicks
		st.Overflowed += sp.stats.Overflowed
		st.VisitorsDropped += sp.stats.VisitorsDropped
		sp.mu.Unlock()
	}
	return st
}
