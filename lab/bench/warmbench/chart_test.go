package warmbench

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
)

// Each arm is a line of its windows' hit ratios (a window without GETs a
// gap) with its 90 % line.
func TestChartHitRatioAfterKill(t *testing.T) {
	win := func(s int, hits, total int64) Window {
		return Window{At: time.Duration(s) * time.Second, Hits: hits, Total: total}
	}
	res := Result{Config: DefaultConfig(), Arms: []Arm{
		{Warmer: false, HitBefore: 0.95, Windows: []Window{win(1, 0, 900), win(2, 300, 1000), win(3, 0, 0), win(4, 700, 1000), win(5, 880, 1000)}},
		{Warmer: true, HitBefore: 0.95, Windows: []Window{win(1, 200, 900), win(2, 850, 1000), win(3, 900, 1000)}},
	}}
	d := svgcharttest.Parse(t, Chart(res).String())
	for _, w := range []struct {
		series           string
		points, polyline int
	}{{"hit ratio, warmer off", 4, 2}, {"hit ratio, warmer on", 3, 1}} {
		if got := d.Count("point", w.series); got != w.points {
			t.Errorf("points of %q: %d, want %d", w.series, got, w.points)
		}
		if got := d.Count("series", w.series); got != w.polyline {
			t.Errorf("polylines of %q: %d, want %d (the empty window is a gap)", w.series, got, w.polyline)
		}
	}
	if got := d.Count("rule", ""); got != 2 {
		t.Errorf("90 %% lines: %d, want 2", got)
	}
	if !strings.Contains(d.Text, "seconds since the kill") {
		t.Errorf("chart text: %s", d.Text)
	}
}
