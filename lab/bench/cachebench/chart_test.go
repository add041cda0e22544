package cachebench

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench"
)

// The chart has one group per throughput row of the table (each a
// tidemark bar beside its ceiling's), valued and noted as the table's
// medians.
func TestChartThroughputAgainstCeiling(t *testing.T) {
	cfg := DefaultConfig()
	rounds := []benchRound{
		{invN: 116_000, invAgain: 183_000, inv1: 60_000, trivial: bench.RedisResult{RPS: 295_000}, set: bench.RedisResult{RPS: 600_000}, script: bench.RedisResult{RPS: 150_000}},
		{invN: 120_000, invAgain: 180_000, inv1: 61_000, trivial: bench.RedisResult{RPS: 300_000}, set: bench.RedisResult{RPS: 610_000}, script: bench.RedisResult{RPS: 155_000}},
		{invN: 100_000, invAgain: 170_000, inv1: 58_000, trivial: bench.RedisResult{RPS: 290_000}, set: bench.RedisResult{RPS: 590_000}, script: bench.RedisResult{RPS: 140_000}},
	}
	c := Chart(Result{Config: cfg, rounds: rounds})
	rows := len(throughputs(cfg, rounds))
	if len(c.Groups) != rows || rows != 5 {
		t.Fatalf("groups %d, throughput rows %d, want 5 each", len(c.Groups), rows)
	}
	d := svgcharttest.Parse(t, c.String())
	for _, s := range c.Series {
		if got := d.Count("bar", s); got != rows {
			t.Errorf("bars of %q: %d, want %d", s, got, rows)
		}
	}
	// Medians: new keys 116k vs 295k (per-round ratios 0.39, 0.40, 0.34: 0.39x).
	if g := c.Groups[0]; g.Values[0] != 116_000 || g.Values[1] != 295_000 || g.Note != "0.39x" {
		t.Errorf("first group %+v, want medians 116000 / 295000 noted 0.39x", g)
	}
	for _, want := range []string{"ceiling: SET", "ceiling: INVALIDATE script", "newer versions, 4 workers", "0.39x"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("chart text lacks %q: %s", want, d.Text)
		}
	}
}
