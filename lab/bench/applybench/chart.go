package applybench

import (
	"fmt"

	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
)

// Chart is the throughput chart of a run: the replay rate beside each
// redis-benchmark ceiling of the same run, noted with their ratio.
func Chart(res Result) svgchart.BarChart {
	cfg := res.Config
	group := func(label string, ceiling float64) svgchart.BarGroup {
		return svgchart.BarGroup{Label: label, Values: []float64{res.ReplayRate, ceiling}, Note: bench.RatioNote(res.ReplayRate, ceiling)}
	}
	return svgchart.BarChart{
		Title: fmt.Sprintf("tidemark-lab bench apply: replay throughput against redis-benchmark ceilings\n"+
			"%d events over %d keys, %d partitions; ratio: replay / ceiling", res.Events, cfg.Keys, cfg.Partitions),
		YLabel: "events/s (replay), requests/s (ceiling)",
		Series: []string{"tidemark applier replay", "redis-benchmark -P 100 -c 50 (ceiling)"},
		Groups: []svgchart.BarGroup{
			group("ceiling: EVALSHA `return 1`", res.CeilingTrivial),
			group("ceiling: EVALSHA, one HSET", res.CeilingKeyed),
		},
		YTick: bench.RateTick,
	}
}
