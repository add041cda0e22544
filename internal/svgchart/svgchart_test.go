package svgchart_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
)

// A line chart with markers draws a dot per finite point and leaves gaps
// for NaN; names are escaped into well-formed XML.
func TestLineChartMarkersAndGaps(t *testing.T) {
	c := svgchart.Chart{
		Title: `p99 <at> "rate" & more`,
		Series: []svgchart.Series{
			{Name: "p50", Markers: true, Points: []svgchart.Point{{1, 2}, {2, math.NaN()}, {3, 4}}},
			{Name: "lone", Markers: true, Points: []svgchart.Point{{2, 9}}},
			{Name: "plain", Points: []svgchart.Point{{1, 1}, {2, 2}}},
		},
		Rules: []svgchart.Rule{{Y: 5, Label: "goal"}},
	}
	d := svgcharttest.Parse(t, c.String())
	for _, w := range []struct {
		class, series string
		n             int
	}{{"point", "p50", 2}, {"point", "lone", 1}, {"point", "plain", 0}, {"series", "p50", 2}, {"series", "plain", 1}, {"rule", "", 1}} {
		if got := d.Count(w.class, w.series); got != w.n {
			t.Errorf("%s marks of %q: %d, want %d", w.class, w.series, got, w.n)
		}
	}
	if !strings.Contains(d.Text, `p99 <at> "rate" & more`) {
		t.Errorf("title lost in escaping: %q", d.Text)
	}
}

// A bar chart draws one bar per finite value, series by series, with the
// group labels (line by line) and notes.
func TestBarChartBars(t *testing.T) {
	c := svgchart.BarChart{
		Title:  "throughput\nmedians of 3 rounds",
		Series: []string{"ours & co", "ceiling"},
		Groups: []svgchart.BarGroup{
			{Label: "round 1\nnew keys", Values: []float64{100, 250}, Note: "0.40x"},
			{Label: "round 2", Values: []float64{120, math.NaN()}},
			{Label: "round 3", Values: []float64{130}},
		},
	}
	d := svgcharttest.Parse(t, c.String())
	if got := d.Count("bar", "ours & co"); got != 3 {
		t.Errorf("bars of ours: %d, want 3", got)
	}
	if got := d.Count("bar", "ceiling"); got != 1 {
		t.Errorf("bars of ceiling: %d, want 1", got)
	}
	for _, want := range []string{"throughput", "medians of 3 rounds", "round 1", "new keys", "0.40x", "ours & co", "ceiling"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("chart text lacks %q: %q", want, d.Text)
		}
	}
	// No data at all still renders a valid empty chart.
	if d := svgcharttest.Parse(t, svgchart.BarChart{}.String()); d.Count("bar", "") != 0 {
		t.Errorf("empty chart has bars")
	}
}

// On a log axis, values that are not positive are gaps (no dot, a break in
// the line) and the axis spans whole decades around the data and rules.
func TestLineChartLogY(t *testing.T) {
	c := svgchart.Chart{
		LogY: true,
		Series: []svgchart.Series{
			{Name: "p99", Markers: true, Points: []svgchart.Point{{1, 0.4}, {2, 0}, {3, 30}, {4, -1}, {5, 2000}}},
		},
		Rules: []svgchart.Rule{{Y: 250, Label: "goal"}},
		YTick: func(y float64) string { return strconv.FormatFloat(y, 'g', 3, 64) + "ms" },
	}
	d := svgcharttest.Parse(t, c.String())
	if got := d.Count("point", "p99"); got != 3 {
		t.Errorf("points: %d, want 3 (0 and -1 are gaps)", got)
	}
	if got := d.Count("series", "p99"); got != 3 {
		t.Errorf("polylines: %d, want 3 runs", got)
	}
	for _, want := range []string{"0.1ms", "1ms", "10ms", "100ms", "1e+03ms", "1e+04ms"} {
		if !strings.Contains(d.Text, want+" ") {
			t.Errorf("log axis lacks tick %q: %q", want, d.Text)
		}
	}
	if strings.Contains(d.Text, "2ms ") {
		t.Errorf("five decades should tick only powers of ten: %q", d.Text)
	}
}

func TestAxisMax(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 21_000: 25_000, 15_839: 20_000, 9: 10, 1: 1, 1.2: 1.25, 130: 150} {
		if got := svgchart.AxisMax(v); math.Abs(got-want) > 1e-9 {
			t.Errorf("AxisMax(%v) = %v, want %v", v, got, want)
		}
	}
}
