package servebench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench/servebench"
)

// Every open-loop step is a p50 and a p99 point at its offered rate, the
// /healthz open-loop ceiling a point of its own; closed-loop steps are not
// plotted (no offered rate) but the saturated rate is in the title.
func TestChartLatencyAgainstOfferedRate(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	rep := servebench.Result{P99Goal: 10 * time.Millisecond, Rows: []servebench.Row{
		{Step: "saturation", Rate: 15839, P50: ms(1.6), P99: ms(9.1)},
		{Step: "open 10%", Target: 1584, Rate: 1583, P50: ms(0.4), P99: ms(1.2)},
		{Step: "open 25%", Target: 3960, Rate: 3958, P50: ms(0.5), P99: ms(2.1)},
		{Step: "open 50%", Target: 7920, Rate: 7913, P50: ms(0.9), P99: ms(9.87)},
		{Step: "open 70%", Target: 11087, Rate: 10950, P50: ms(3.2), P99: ms(41)},
		{Step: "open 85%", Target: 13463, Rate: 12001, P50: ms(30), P99: ms(220)},
		{Step: "ceiling /healthz", Rate: 18973, P50: ms(1.2), P99: ms(6)},
		{Step: "ceiling /healthz open 10%", Target: -1584, Rate: 1584, P50: ms(0.2), P99: ms(0.6)},
	}}
	d := svgcharttest.Parse(t, servebench.Chart(rep).String())
	for _, w := range []struct {
		series string
		n      int
	}{{"GET p50", 5}, {"GET p99", 5}, {"/healthz p99 (ceiling)", 1}} {
		if got := d.Count("point", w.series); got != w.n {
			t.Errorf("points of %q: %d, want %d", w.series, got, w.n)
		}
	}
	if got := d.Count("rule", ""); got != 1 {
		t.Errorf("goal lines: %d, want 1", got)
	}
	for _, want := range []string{"saturates at 15839 req/s", "goal: p99 < 10ms", "220 ms at 13.5k"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("chart text lacks %q: %s", want, d.Text)
		}
	}
}
