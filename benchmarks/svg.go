package main

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// The HTML report draws its charts as inline SVG: go-echarts loads
// echarts.min.js from a CDN (its AssetsHost), which a page meant to be
// archived, mailed or opened offline cannot rely on.

// chart is a line chart with numeric axes, each linear or log10.
type chart struct {
	Title          string
	XLabel, YLabel string
	YLog           bool
	XTicks         []tick // where to label the x axis; the y axis labels itself
	YFormat        func(float64) string
	Series         []series
}

type tick struct {
	At    float64
	Label string
}

type series struct {
	Name   string
	Points [][2]float64 // x, y
}

const (
	chartW, chartH                   = 440, 250
	padL, padR, padT, padB           = 64, 16, 28, 44
	plotW, plotH                     = chartW - padL - padR, chartH - padT - padB
	legendDy                         = 14
	axisColor, gridColor, labelColor = "#888", "#e4e4e4", "#333"
)

var seriesColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}

// svg renders c. A chart with no points renders as a note.
func (c chart) svg() template.HTML {
	c.Series = c.plottable()
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			y := c.yScale(p[1])
			xmin, xmax = min(xmin, p[0]), max(xmax, p[0])
			ymin, ymax = min(ymin, y), max(ymax, y)
		}
	}
	for _, t := range c.XTicks {
		xmin, xmax = min(xmin, t.At), max(xmax, t.At)
	}
	if math.IsInf(xmin, 0) || math.IsInf(ymin, 0) || math.IsNaN(ymin) {
		return template.HTML(`<p class="nochart">` + template.HTMLEscapeString(c.Title) + `: nothing measured</p>`)
	}
	yticks := c.yTicks(ymin, ymax)
	ymin, ymax = min(ymin, yticks[0].At), max(ymax, yticks[len(yticks)-1].At)
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 { return padT + plotH - (y-ymin)/(ymax-ymin)*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, template.HTMLEscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold" fill="%s">%s</text>`, padL, labelColor, template.HTMLEscapeString(c.Title))
	for _, t := range yticks {
		y := py(t.At)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`, padL, padL+plotW, y, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="10" text-anchor="end" fill="%s">%s</text>`, padL-4, y+3, labelColor, template.HTMLEscapeString(t.Label))
	}
	for _, t := range c.XTicks {
		x := px(t.At)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/>`, x, x, padT, padT+plotH, gridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="%s">%s</text>`, x, padT+plotH+13, labelColor, template.HTMLEscapeString(t.Label))
	}
	fmt.Fprintf(&b, `<path d="M%d %d V%d H%d" fill="none" stroke="%s"/>`, padL, padT, padT+plotH, padL+plotW, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" text-anchor="middle" fill="%s">%s</text>`, padL+plotW/2, chartH-6, labelColor, template.HTMLEscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(12 %d) rotate(-90)" font-size="11" text-anchor="middle" fill="%s">%s</text>`, padT+plotH/2, labelColor, template.HTMLEscapeString(c.YLabel))
	for i, s := range c.Series {
		color := seriesColors[i%len(seriesColors)]
		var d strings.Builder
		for j, p := range s.Points {
			fmt.Fprintf(&d, "%s%.1f %.1f ", map[bool]string{true: "M", false: "L"}[j == 0], px(p[0]), py(c.yScale(p[1])))
		}
		fmt.Fprintf(&b, `<path class="series" d="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.TrimSpace(d.String()), color)
		for _, p := range s.Points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s: %s</title></circle>`,
				px(p[0]), py(c.yScale(p[1])), color, template.HTMLEscapeString(s.Name), template.HTMLEscapeString(c.YFormat(p[1])))
		}
		if len(c.Series) > 1 {
			y := padT + 10 + i*legendDy
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" font-size="10" fill="%s">%s</text>`,
				padL+8, y-3, color, padL+22, y+1, labelColor, template.HTMLEscapeString(s.Name))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// plottable drops the points a log axis cannot show (y ≤ 0).
func (c chart) plottable() []series {
	out := make([]series, len(c.Series))
	for i, s := range c.Series {
		out[i].Name = s.Name
		for _, p := range s.Points {
			if y := c.yScale(p[1]); !math.IsInf(y, 0) && !math.IsNaN(y) {
				out[i].Points = append(out[i].Points, p)
			}
		}
	}
	return out
}

// yScale maps a value onto the y axis: log10 for a log chart.
func (c chart) yScale(v float64) float64 {
	if c.YLog {
		return math.Log10(v)
	}
	return v
}

// yTicks labels a log axis at powers of ten and a linear one at 4–8 round
// steps from 0; lo and hi are in axis units.
func (c chart) yTicks(lo, hi float64) []tick {
	var ts []tick
	if c.YLog {
		for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
			ts = append(ts, tick{e, c.YFormat(math.Pow(10, e))})
		}
		return ts
	}
	step := niceStep(hi / 5)
	for v := 0.0; v < hi+step; v += step {
		ts = append(ts, tick{v, c.YFormat(v)})
	}
	return ts
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
