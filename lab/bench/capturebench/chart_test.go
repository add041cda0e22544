package capturebench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench/capturebench"
)

// The chart has a capture bar and a pg_recvlogical bar per round plus the
// medians, noted with the medians' ratio as the table prints it.
func TestChartThroughputAgainstCeiling(t *testing.T) {
	res := capturebench.Result{
		Rows:               500_000,
		RecvlogicalRounds:  []time.Duration{7930 * time.Millisecond, 8561 * time.Millisecond, 5636 * time.Millisecond},
		CaptureRounds:      []time.Duration{14159 * time.Millisecond, 8685 * time.Millisecond, 6504 * time.Millisecond},
		RecvlogicalElapsed: 7930 * time.Millisecond,
		CaptureElapsed:     8685 * time.Millisecond,
	}
	c := capturebench.Chart(res)
	d := svgcharttest.Parse(t, c.String())
	for _, s := range c.Series {
		if got := d.Count("bar", s); got != 4 {
			t.Errorf("bars of %q: %d, want 4 (3 rounds + median)", s, got)
		}
	}
	for _, want := range []string{"round 1", "round 3", "median", "0.91x", "500000 row changes"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("chart text lacks %q: %s", want, d.Text)
		}
	}
}
