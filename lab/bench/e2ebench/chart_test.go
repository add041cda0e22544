package e2ebench

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
)

// Every phase is a point of commit → applied p50 and p99 and of
// commit → produced p99 at the changes/s it offered; the ceiling is one
// point at the single-row rate; both goals are lines.
func TestChartLatencyAgainstOfferedRate(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	res := Result{
		Config:  DefaultConfig(),
		Ceiling: Dist{N: 120_000, P50: ms(1.1), P99: ms(4.2)},
		Phases: []Phase{
			{Name: "2000 tx/s", TxRate: 2000, RowsPerTx: 1, Produced: Dist{N: 120_000, P50: ms(2), P99: ms(7)}, Applied: Dist{N: 120_000, P50: ms(3), P99: ms(11)}},
			{Name: "20000 changes/s", TxRate: 1000, RowsPerTx: 20, Produced: Dist{N: 1_200_000, P50: ms(20), P99: ms(90)}, Applied: Dist{N: 1_200_000, P50: ms(35), P99: ms(180)}},
		},
	}
	d := svgcharttest.Parse(t, Chart(res).String())
	for _, w := range []struct {
		series string
		n      int
	}{{"applied p50", 2}, {"applied p99", 2}, {"produced p99", 2}, {"pg_recvlogical p99 (ceiling)", 1}} {
		if got := d.Count("point", w.series); got != w.n {
			t.Errorf("points of %q: %d, want %d", w.series, got, w.n)
		}
	}
	if got := d.Count("rule", ""); got != 2 {
		t.Errorf("goal lines: %d, want 2", got)
	}
	for _, want := range []string{"180 ms at 20k", "11 ms at 2k", "4.2 ms at 2k", "goal: p99 ≤ 250ms at 20000 changes/s"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("chart text lacks %q: %s", want, d.Text)
		}
	}
}
