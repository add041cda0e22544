// Package svgchart draws small self-contained SVG charts: line charts (the
// status page's freshness plot, benchmark latency against offered rate) and
// grouped bar charts (benchmark throughput against its ceiling). The output
// is one <svg> element with inline styles and no script or external
// reference, so it can be embedded in a page or saved as a file.
package svgchart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Point is one sample; a NaN or infinite Y leaves a gap in the line.
type Point struct{ X, Y float64 }

// Series is one line.
type Series struct {
	Name   string
	Color  string // CSS color; a palette color when empty
	Points []Point
	// Markers draws a dot on every finite point: for a few measured points
	// (a lone point has no line to show it).
	Markers bool
}

// Rule is a horizontal reference line (a threshold).
type Rule struct {
	Y     float64
	Label string
	Color string
}

// Chart describes one chart.
type Chart struct {
	Title         string // "\n" starts a line of smaller text under the title
	XLabel        string
	YLabel        string
	Width, Height int // pixels; 720x300 when zero
	Series        []Series
	Rules         []Rule
	// XMin, XMax fix the X range; when equal, it is fitted to the data.
	XMin, XMax float64
	// YMin is the bottom of the Y axis (0 by default); the top is fitted.
	YMin float64
	// LogY draws the Y axis on a log scale fitted to whole decades (YMin is
	// ignored): for latencies that span milliseconds to seconds. Values
	// that are not positive leave gaps.
	LogY bool
	// XTick formats an X tick; %g when nil.
	XTick func(x float64) string
	// YTick formats a Y tick; %g when nil.
	YTick func(y float64) string
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

const (
	padLeft, padRight, padTitle, padBottom = 64, 16, 28, 56
)

// Render writes the chart as an SVG document fragment.
func (c Chart) Render(w io.Writer) error {
	_, err := io.WriteString(w, c.String())
	return err
}

// String is the chart's SVG.
func (c Chart) String() string {
	wd, ht := c.Width, c.Height
	if wd <= 0 {
		wd = 720
	}
	if ht <= 0 {
		ht = 300
	}
	xmin, xmax := c.XMin, c.XMax
	ymin, ymax := c.YMin, c.YMin
	if c.LogY {
		ymin, ymax = math.Inf(1), math.Inf(-1)
	}
	fitX := xmin == xmax
	if fitX {
		xmin, xmax = math.Inf(1), math.Inf(-1)
	}
	drawn := func(p Point) bool { return finite(p.Y) && finite(p.X) && (!c.LogY || p.Y > 0) }
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !drawn(p) {
				continue
			}
			if fitX {
				xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			}
			ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
		}
	}
	for _, r := range c.Rules {
		if !c.LogY || r.Y > 0 {
			ymin, ymax = math.Min(ymin, r.Y), math.Max(ymax, r.Y)
		}
	}
	if !finite(xmin) || !finite(xmax) {
		xmin, xmax = 0, 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	padTop, extra := titleSpace(c.Title)
	ht += extra
	plotW, plotH := float64(wd-padLeft-padRight), float64(ht-padBottom)-padTop
	px := func(x float64) float64 { return padLeft + (x-xmin)/(xmax-xmin)*plotW }
	var py func(y float64) float64
	var yticks []float64
	if c.LogY {
		ymin, ymax, yticks = logAxis(ymin, ymax)
		lo, hi := math.Log10(ymin), math.Log10(ymax)
		py = func(y float64) float64 {
			y = math.Min(math.Max(y, ymin), ymax)
			return padTop + plotH - (math.Log10(y)-lo)/(hi-lo)*plotH
		}
	} else {
		ymin = c.YMin
		ymax = niceCeil(ymax-ymin) + ymin
		if ymax <= ymin {
			ymax = ymin + 1
		}
		for i := 0; i <= 5; i++ {
			yticks = append(yticks, ymin+(ymax-ymin)*float64(i)/5)
		}
		py = func(y float64) float64 {
			y = math.Min(math.Max(y, ymin), ymax)
			return padTop + plotH - (y-ymin)/(ymax-ymin)*plotH
		}
	}
	xfmt, yfmt := c.XTick, c.YTick
	if xfmt == nil {
		xfmt = func(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }
	}
	if yfmt == nil {
		yfmt = func(y float64) string { return strconv.FormatFloat(y, 'g', 4, 64) }
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, wd, ht, wd, ht)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, wd, ht)
	writeTitle(&b, c.Title)
	// Grid and ticks: five steps on each axis.
	for _, y := range yticks {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, padLeft, padLeft+plotW, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padLeft-6, py(y)+4, esc(yfmt(y)))
	}
	for i := 0; i <= 5; i++ {
		x := xmin + (xmax-xmin)*float64(i)/5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, px(x), padTop+plotH+16, esc(xfmt(x)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, padLeft, padTop, plotW, plotH)
	if c.XLabel != "" {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, padLeft+plotW/2, padTop+plotH+32, esc(c.XLabel))
	}
	if c.YLabel != "" {
		fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`, padTop+plotH/2, esc(c.YLabel))
	}
	for _, r := range c.Rules {
		col := r.Color
		if col == "" {
			col = "#888"
		}
		fmt.Fprintf(&b, `<line class="rule" x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`, padLeft, padLeft+plotW, py(r.Y), py(r.Y), esc(col))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`, padLeft+plotW-4, py(r.Y)-3, esc(col), esc(r.Label))
	}
	// Lines: one polyline per unbroken run of finite points.
	names := make([]string, len(c.Series))
	for i, s := range c.Series {
		names[i] = s.Name
	}
	legend := legendX(names)
	for i, s := range c.Series {
		col := s.Color
		if col == "" {
			col = palette[i%len(palette)]
		}
		var run []string
		flush := func() {
			if len(run) > 0 {
				fmt.Fprintf(&b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`, esc(s.Name), esc(col), strings.Join(run, " "))
			}
			run = run[:0]
		}
		for _, p := range s.Points {
			if !drawn(p) {
				flush()
				continue
			}
			run = append(run, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
		}
		flush()
		if s.Markers {
			for _, p := range s.Points {
				if drawn(p) {
					fmt.Fprintf(&b, `<circle class="point" data-series="%s" cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s at %s</title></circle>`,
						esc(s.Name), px(p.X), py(p.Y), esc(col), esc(s.Name), esc(yfmt(p.Y)), esc(xfmt(p.X)))
				}
			}
		}
		// Legend below the X label.
		lx := legend[i]
		ly := ht - 8
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`, lx, lx+16, ly-4, ly-4, esc(col))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, lx+20, ly, esc(s.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// titleSpace is the plot's top edge under title and how much taller than
// Height the chart grows to keep its plot for the extra title lines.
func titleSpace(title string) (float64, int) {
	extra := 15 * strings.Count(title, "\n")
	return float64(padTitle + extra), extra
}

// writeTitle writes title's first line in bold and the others smaller.
func writeTitle(b *strings.Builder, title string) {
	if title == "" {
		return
	}
	for i, line := range strings.Split(title, "\n") {
		if i == 0 {
			fmt.Fprintf(b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, padLeft, esc(line))
		} else {
			fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`, padLeft, 16+15*i, esc(line))
		}
	}
}

// legendX places legend entries side by side from the plot's left edge,
// each as wide as its name (about 6 px a character at font-size 11).
func legendX(names []string) []int {
	xs := make([]int, len(names))
	x := padLeft
	for i, n := range names {
		xs[i] = x
		x += 20 + 6*utf8.RuneCountInString(n) + 24
	}
	return xs
}

// logAxis widens [lo, hi] to whole decades and picks its ticks: 1, 2 and 5
// times each power of ten over at most three decades, the powers alone over
// more.
func logAxis(lo, hi float64) (float64, float64, []float64) {
	if !finite(lo) || !finite(hi) || lo <= 0 {
		lo, hi = 1, 10
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	steps := []float64{1, 2, 5}
	if hi/lo > 1000*1.001 {
		steps = []float64{1}
	}
	var ticks []float64
	for d := lo; d < hi*0.999; d *= 10 {
		for _, m := range steps {
			ticks = append(ticks, d*m)
		}
	}
	return lo, hi, append(ticks, hi)
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// AxisMax is a top for an axis that starts at 0 and holds v: five equal
// steps of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten, so the ticks
// read round without leaving much of the axis empty.
func AxisMax(v float64) float64 {
	if v <= 0 || !finite(v) {
		return 1
	}
	step := v / 5
	p := math.Pow(10, math.Floor(math.Log10(step)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= step {
			return 5 * m * p
		}
	}
	return 50 * p
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 || !finite(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string { return html.EscapeString(s) }
