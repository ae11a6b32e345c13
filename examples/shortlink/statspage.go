package main

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/casebook-dev/casebook/shortlink"
)

//go:embed statspage.html
var pageSource string

var (
	pageTemplate = template.Must(template.New("stats").Parse(pageSource))
	// pagePolicy forbids scripts, frames, forms and every fetch; the only
	// style allowed is the page's own <style>, by its hash.
	pagePolicy = "default-src 'none'; style-src '" + styleHash(pageSource) + "'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

func styleHash(page string) string {
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindStringSubmatch(page)
	sum := sha256.Sum256([]byte(m[1]))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// pageDims are the breakdowns the page shows, in order, with their titles.
var pageDims = []struct {
	dim   shortlink.Dimension
	title string
}{
	{shortlink.DimReferrer, "Referrers"}, {shortlink.DimCountry, "Countries"}, {shortlink.DimDevice, "Devices"},
	{shortlink.DimUTMSource, "utm_source"}, {shortlink.DimUTMMedium, "utm_medium"}, {shortlink.DimUTMCampaign, "utm_campaign"},
}

// pageRows is the size of each breakdown.
const pageRows = 10

// statsPage serves GET /api/links/{code}/stats.html?from=&to=&step=, one
// self-contained HTML document (no script, nothing fetched, a policy that
// forbids both) of what GET /api/links/{code}/stats answers: the clicks per
// step as an SVG bar chart, people and bots apart; the top 10 values of
// every dimension over the chart's range; the unique visitors of the
// range's last UTC day (today, by default).
//
// It sits under /api/, which no short code can take ("api" is a reserved
// alias, and a code is one path segment), behind the same bearer key. It
// reads the series and the breakdowns through api, the JSON route itself,
// in process, with the caller's request: the same authorizer, owner check
// (another owner's link is 404, as no link is), parameters, errors (copied
// as they come) and miss limit, at the cost of a clicks and six breakdown
// operations per page. The key is taken only from the Authorization
// header, never from the URL, where it would stay in browser history and
// in server and proxy logs (it is this server's only key, and it deletes
// links).
func statsPage(svc *shortlink.Service, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := r.PathValue("code")
		q := r.URL.Query()
		for name := range q {
			if name != "from" && name != "to" && name != "step" {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("the stats page takes from, to and step, not %.32q", name))
				return
			}
		}
		var series struct {
			From, To time.Time
			Step     string
			Points   []shortlink.Point
		}
		if !readAPI(w, r, api, code, q, &series) {
			return
		}
		step, err := time.ParseDuration(series.Step)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "the stats route answered step "+series.Step)
			return
		}
		page := pageData{Code: code, Step: series.Step, Chart: newChart(series.Points, step)}
		if n := len(series.Points); n > 0 {
			page.From, page.To = series.Points[0].Start, series.Points[n-1].Start.Add(step)
		} else {
			page.From, page.To = series.From, series.To
		}
		for _, p := range series.Points {
			page.Clicks, page.Bots = page.Clicks+p.Clicks, page.Bots+p.Bots
		}
		// The tables cover the chart's bars: whole steps.
		for _, d := range pageDims {
			var bd struct{ Values []shortlink.Count }
			if len(series.Points) > 0 {
				bq := url.Values{"dim": {string(d.dim)}, "n": {fmt.Sprint(pageRows)},
					"from": {page.From.Format(time.RFC3339)}, "to": {page.To.Format(time.RFC3339)}}
				if !readAPI(w, r, api, code, bq, &bd) {
					return
				}
			}
			page.Tables = append(page.Tables, table{ID: "dim-" + string(d.dim), Title: d.title, Rows: bd.Values})
		}
		page.Day = series.To.Add(-time.Nanosecond).UTC().Truncate(24 * time.Hour)
		if page.Uniques, err = svc.Uniques(r.Context(), code, page.Day); err != nil {
			writeError(w, http.StatusInternalServerError, "internal error")
			return
		}
		var body bytes.Buffer
		if err := pageTemplate.Execute(&body, page); err != nil {
			writeError(w, http.StatusInternalServerError, "internal error")
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", pagePolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "private, no-store")
		w.Write(body.Bytes())
	})
}

// readAPI asks api for GET /api/links/{code}/stats?q on behalf of r's
// caller and decodes the answer into v; any other answer than 200 it
// copies to w and returns false.
func readAPI(w http.ResponseWriter, r *http.Request, api http.Handler, code string, q url.Values, v any) bool {
	sub := r.Clone(r.Context())
	sub.Method, sub.Body, sub.ContentLength = http.MethodGet, http.NoBody, 0
	sub.URL = &url.URL{Path: "/api/links/" + code + "/stats", RawPath: "/api/links/" + url.PathEscape(code) + "/stats", RawQuery: q.Encode()}
	sub.RequestURI = sub.URL.RequestURI()
	var res recorder
	res.header = http.Header{}
	api.ServeHTTP(&res, sub)
	if res.status == 0 {
		res.status = http.StatusOK
	}
	if res.status == http.StatusOK {
		if err := json.Unmarshal(res.body.Bytes(), v); err == nil {
			return true
		}
		res.status = http.StatusInternalServerError
		res.body.Reset()
		fmt.Fprint(&res.body, `{"error":"internal error"}`+"\n")
	}
	for k, vs := range res.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.status)
	w.Write(res.body.Bytes())
	return false
}

// recorder keeps an in-process answer of the API.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// writeError answers as the API does: {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

type pageData struct {
	Code         string
	From, To     time.Time
	Step         string
	Clicks, Bots int64
	Chart        chart
	Tables       []table
	Day          time.Time
	Uniques      int64
}

type table struct {
	ID, Title string
	Rows      []shortlink.Count
}

// The chart's geometry, in SVG user units.
const (
	chartWidth, chartHeight = 760, 260
	plotLeft, plotTop       = 52, 10
	plotWidth, plotHeight   = chartWidth - plotLeft - 8, chartHeight - plotTop - 28
	maxXLabels              = 8
)

type chart struct {
	Width, Height, Left, Top, Right, Bottom int
	Bars                                    []bar
	YTicks                                  []yTick
	XLabels                                 []xLabel
}

// bar is a step: people at the bottom, bots stacked on them.
type bar struct {
	Start                                time.Time
	Clicks, Bots                         int64
	X, W, PeopleY, PeopleH, BotsY, BotsH float64
}

type yTick struct {
	Value int64
	Y     float64
}

type xLabel struct {
	Text string
	X    float64
}

func newChart(points []shortlink.Point, step time.Duration) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Left: plotLeft, Top: plotTop,
		Right: plotLeft + plotWidth, Bottom: plotTop + plotHeight}
	var peak int64
	for _, p := range points {
		peak = max(peak, p.Clicks+p.Bots)
	}
	tick := niceStep(peak)
	top := max(tick, (peak+tick-1)/tick*tick)
	scale := float64(plotHeight) / float64(top)
	for v := int64(0); v <= top; v += tick {
		c.YTicks = append(c.YTicks, yTick{Value: v, Y: float64(c.Bottom) - float64(v)*scale})
	}
	if len(points) == 0 {
		return c
	}
	width := float64(plotWidth) / float64(len(points))
	every := (len(points) + maxXLabels - 1) / maxXLabels
	layout := "15:04"
	if step >= 24*time.Hour {
		layout = "Jan 2"
	}
	for i, p := range points {
		b := bar{Start: p.Start, Clicks: p.Clicks, Bots: p.Bots, X: float64(plotLeft) + float64(i)*width, W: width * 0.8}
		b.PeopleH = float64(p.Clicks) * scale
		b.PeopleY = float64(c.Bottom) - b.PeopleH
		b.BotsH = float64(p.Bots) * scale
		b.BotsY = b.PeopleY - b.BotsH
		c.Bars = append(c.Bars, b)
		if i%every == 0 {
			c.XLabels = append(c.XLabels, xLabel{Text: p.Start.UTC().Format(layout), X: b.X + b.W/2})
		}
	}
	return c
}

// niceStep is the y axis' tick: the least of 1, 2, 5, 10, 20, 50, … that
// divides 0..peak into at most 4 steps.
func niceStep(peak int64) int64 {
	for s := int64(1); ; s *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if s*m*4 >= peak {
				return s * m
			}
		}
	}
}
