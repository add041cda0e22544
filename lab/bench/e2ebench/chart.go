package e2ebench

import (
	"fmt"

	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
)

// Chart is the latency chart of a run: commit → applied (p50, p99) and
// commit → produced (p99) of every phase against the changes/s the phase
// offered, pg_recvlogical's p99 (the ceiling) at its single-row rate, and
// the goals' p99 lines; with the Debezium arm, Debezium's commit → callback
// p99 at the single-row rate.
func Chart(res Result) svgchart.Chart {
	cfg := res.Config
	appliedP50 := svgchart.Series{Name: "applied p50", Markers: true}
	appliedP99 := svgchart.Series{Name: "applied p99", Markers: true}
	producedP99 := svgchart.Series{Name: "produced p99", Markers: true}
	ceiling := svgchart.Series{Name: "pg_recvlogical p99 (ceiling)", Markers: true}
	xmax := float64(cfg.TxRate)
	for _, p := range res.Phases {
		x := p.TxRate * float64(p.RowsPerTx)
		xmax = max(xmax, x)
		appliedP50.Points = append(appliedP50.Points, svgchart.Point{X: x, Y: bench.MsOf(p.Applied.P50)})
		appliedP99.Points = append(appliedP99.Points, svgchart.Point{X: x, Y: bench.MsOf(p.Applied.P99)})
		producedP99.Points = append(producedP99.Points, svgchart.Point{X: x, Y: bench.MsOf(p.Produced.P99)})
	}
	if res.Ceiling.N > 0 {
		ceiling.Points = append(ceiling.Points, svgchart.Point{X: float64(cfg.TxRate), Y: bench.MsOf(res.Ceiling.P99)})
	}
	series := []svgchart.Series{appliedP50, appliedP99, producedP99, ceiling}
	if d := res.Debezium; d != nil && d.Callback.N > 0 {
		series = append(series, svgchart.Series{Name: "Debezium p99", Markers: true,
			Points: []svgchart.Point{{X: float64(cfg.TxRate), Y: bench.MsOf(d.Callback.P99)}}})
	}
	return svgchart.Chart{
		Title: fmt.Sprintf("tidemark-lab bench e2e: commit → applied latency against offered rate\n"+
			"each phase %s; capture, apply and the broker as separate processes; exact per-change samples", cfg.Duration),
		XLabel: "offered row changes/s",
		YLabel: "latency (log scale)",
		LogY:   true,
		Series: series,
		Rules: []svgchart.Rule{
			{Y: bench.MsOf(GoalTxP99), Label: fmt.Sprintf("goal: p99 ≤ %s at %d tx/s", GoalTxP99, cfg.TxRate), Color: "#b58900"},
			{Y: bench.MsOf(GoalChangesP99), Label: fmt.Sprintf("goal: p99 ≤ %s at %d changes/s", GoalChangesP99, cfg.ChangeRate), Color: "#dc322f"},
		},
		XMax:  svgchart.AxisMax(xmax * 1.05),
		XTick: bench.RateTick,
		YTick: bench.MsTick,
	}
}
