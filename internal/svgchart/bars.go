package svgchart

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// BarGroup is one cluster of bars, one bar per series of its BarChart.
type BarGroup struct {
	// Label names the group under its bars; "\n" breaks it into lines.
	Label string
	// Values holds one value per series; a NaN or infinite value (or a
	// missing one) draws no bar.
	Values []float64
	// Note is written above the group, e.g. the ratio of its two bars.
	Note string
}

// BarChart is a grouped bar chart: each group puts its series side by side
// (a measurement beside its ceiling).
type BarChart struct {
	Title         string // "\n" starts a line of smaller text under the title
	YLabel        string
	Width, Height int // pixels; 720x340 when zero
	Series        []string
	Colors        []string // per series; palette colors when empty
	Groups        []BarGroup
	// YTick formats a Y tick and a bar's value; %g when nil.
	YTick func(y float64) string
}

// Bar charts leave room under the plot for two-line group labels and the
// legend.
const barPadBottom = 76

// Render writes the chart as an SVG document fragment.
func (c BarChart) Render(w io.Writer) error {
	_, err := io.WriteString(w, c.String())
	return err
}

// String is the chart's SVG.
func (c BarChart) String() string {
	wd, ht := c.Width, c.Height
	if wd <= 0 {
		wd = 720
	}
	if ht <= 0 {
		ht = 340
	}
	ymax := 0.0
	for _, g := range c.Groups {
		for _, v := range g.Values {
			if finite(v) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	ymax = AxisMax(ymax * 1.08) // room for the notes above the bars
	yfmt := c.YTick
	if yfmt == nil {
		yfmt = func(y float64) string { return strconv.FormatFloat(y, 'g', 4, 64) }
	}
	padTop, extra := titleSpace(c.Title)
	ht += extra
	plotW, plotH := float64(wd-padLeft-padRight), float64(ht-barPadBottom)-padTop
	py := func(y float64) float64 {
		y = math.Min(math.Max(y, 0), ymax)
		return padTop + plotH - y/ymax*plotH
	}
	color := func(i int) string {
		if i < len(c.Colors) && c.Colors[i] != "" {
			return c.Colors[i]
		}
		return palette[i%len(palette)]
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, wd, ht, wd, ht)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, wd, ht)
	writeTitle(&b, c.Title)
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, padLeft, padLeft+plotW, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padLeft-6, py(y)+4, esc(yfmt(y)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, padLeft, padTop, plotW, plotH)
	if c.YLabel != "" {
		fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`, padTop+plotH/2, esc(c.YLabel))
	}
	// Each group gets an equal slot; its bars fill 70% of it.
	n := max(len(c.Series), 1)
	slot := plotW / float64(max(len(c.Groups), 1))
	barW := slot * 0.7 / float64(n)
	for gi, g := range c.Groups {
		x0 := padLeft + slot*float64(gi) + slot*0.15
		top := padTop + plotH
		for si := range c.Series {
			if si >= len(g.Values) || !finite(g.Values[si]) {
				continue
			}
			v := g.Values[si]
			y := py(v)
			top = math.Min(top, y)
			fmt.Fprintf(&b, `<rect class="bar" data-series="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`,
				esc(c.Series[si]), x0+barW*float64(si), y, math.Max(barW-2, 1), padTop+plotH-y, esc(color(si)), esc(c.Series[si]), esc(yfmt(v)))
		}
		cx := padLeft + slot*(float64(gi)+0.5)
		if g.Note != "" {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`, cx, math.Max(top-4, padTop+12), esc(g.Note))
		}
		for li, line := range strings.Split(g.Label, "\n") {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, cx, padTop+plotH+15+13*float64(li), esc(line))
		}
	}
	legend := legendX(c.Series)
	for i, name := range c.Series {
		lx := legend[i]
		ly := ht - 8
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/>`, lx, ly-9, esc(color(i)))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, lx+16, ly, esc(name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
