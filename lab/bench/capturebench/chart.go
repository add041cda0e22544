package capturebench

import (
	"fmt"

	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
)

// Chart is the throughput chart of a run: each round's drain rate of
// capture beside pg_recvlogical's (the ceiling) on the same WAL, then the
// medians the table reports, each group noted with its ratio.
func Chart(res Result) svgchart.BarChart {
	rate := func(elapsed float64) float64 { return float64(res.Rows) / elapsed }
	group := func(label string, capture, recv float64) svgchart.BarGroup {
		return svgchart.BarGroup{Label: label, Values: []float64{capture, recv}, Note: bench.RatioNote(capture, recv)}
	}
	var groups []svgchart.BarGroup
	for i := range min(len(res.CaptureRounds), len(res.RecvlogicalRounds)) {
		groups = append(groups, group(fmt.Sprintf("round %d", i+1),
			rate(res.CaptureRounds[i].Seconds()), rate(res.RecvlogicalRounds[i].Seconds())))
	}
	groups = append(groups, group("median", res.CaptureRate(), res.RecvlogicalRate()))
	return svgchart.BarChart{
		Title: fmt.Sprintf("tidemark-lab bench capture: drain rate against pg_recvlogical's\n"+
			"%d row changes (pgoutput, same WAL); bars: each round, then the medians; ratio: capture / ceiling", res.Rows),
		YLabel: "row changes/s",
		Series: []string{"tidemark capture → kfake (acked)", "pg_recvlogical, same WAL (ceiling)"},
		Groups: groups,
		YTick:  bench.RateTick,
	}
}
