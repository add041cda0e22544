package applybench_test

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench/applybench"
)

// The chart puts the replay rate beside each of the two ceilings, noted
// with the ratio.
func TestChartThroughputAgainstCeiling(t *testing.T) {
	res := applybench.Result{Config: applybench.DefaultConfig(), Events: 1_000_000, ReplayRate: 307_956, CeilingTrivial: 931_966, CeilingKeyed: 392_927}
	c := applybench.Chart(res)
	d := svgcharttest.Parse(t, c.String())
	for _, s := range c.Series {
		if got := d.Count("bar", s); got != 2 {
			t.Errorf("bars of %q: %d, want 2", s, got)
		}
	}
	for _, want := range []string{"0.33x", "0.78x", "1000000 events over 100000 keys"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("chart text lacks %q: %s", want, d.Text)
		}
	}
}
