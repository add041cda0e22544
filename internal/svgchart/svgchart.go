// Package svgchart draws small self-contained SVG line charts: the status
// page's freshness plot and the benchmark charts. The output is one <svg>
// element with inline styles and no script or external reference, so it can
// be embedded in a page or saved as a file.
package svgchart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Point is one sample; a NaN or infinite Y leaves a gap in the line.
type Point struct{ X, Y float64 }

// Series is one line.
type Series struct {
	Name   string
	Color  string // CSS color; a palette color when empty
	Points []Point
}

// Rule is a horizontal reference line (a threshold).
type Rule struct {
	Y     float64
	Label string
	Color string
}

// Chart describes one chart.
type Chart struct {
	Title         string
	XLabel        string
	YLabel        string
	Width, Height int // pixels; 720x300 when zero
	Series        []Series
	Rules         []Rule
	// XMin, XMax fix the X range; when equal, it is fitted to the data.
	XMin, XMax float64
	// YMin is the bottom of the Y axis (0 by default); the top is fitted.
	YMin float64
	// XTick formats an X tick; %g when nil.
	XTick func(x float64) string
	// YTick formats a Y tick; %g when nil.
	YTick func(y float64) string
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

const (
	padLeft, padRight, padTop, padBottom = 64, 16, 28, 56
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
	ymax := c.YMin
	fitX := xmin == xmax
	if fitX {
		xmin, xmax = math.Inf(1), math.Inf(-1)
	}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !finite(p.Y) || !finite(p.X) {
				continue
			}
			if fitX {
				xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			}
			ymax = math.Max(ymax, p.Y)
		}
	}
	for _, r := range c.Rules {
		ymax = math.Max(ymax, r.Y)
	}
	if !finite(xmin) || !finite(xmax) {
		xmin, xmax = 0, 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	ymax = niceCeil(ymax - c.YMin)
	ymax += c.YMin
	if ymax <= c.YMin {
		ymax = c.YMin + 1
	}
	plotW, plotH := float64(wd-padLeft-padRight), float64(ht-padTop-padBottom)
	px := func(x float64) float64 { return padLeft + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 {
		y = math.Min(math.Max(y, c.YMin), ymax)
		return padTop + plotH - (y-c.YMin)/(ymax-c.YMin)*plotH
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
	if c.Title != "" {
		fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, padLeft, esc(c.Title))
	}
	// Grid and ticks: five steps on each axis.
	for i := 0; i <= 5; i++ {
		y := c.YMin + (ymax-c.YMin)*float64(i)/5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, padLeft, padLeft+plotW, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padLeft-6, py(y)+4, esc(yfmt(y)))
		x := xmin + (xmax-xmin)*float64(i)/5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, px(x), padTop+plotH+16, esc(xfmt(x)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, padLeft, padTop, plotW, plotH)
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
			if !finite(p.Y) || !finite(p.X) {
				flush()
				continue
			}
			run = append(run, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
		}
		flush()
		// Legend below the X label.
		lx := padLeft + i*170
		ly := ht - 8
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`, lx, lx+16, ly-4, ly-4, esc(col))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, lx+20, ly, esc(s.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

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
