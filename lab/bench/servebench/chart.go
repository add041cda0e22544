package servebench

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
)

// Chart is the latency chart of a run: p50 and p99 of every open-loop step
// against its offered rate, the /healthz ceiling's p99 at the rate it was
// offered, and the p99 goal. The X axis runs from 0 to the closed-loop
// (saturated) rate, which the title gives, or to the highest rate offered
// when the steps climbed past it; closed-loop steps have no offered rate and
// are not plotted.
func Chart(rep Result) svgchart.Chart {
	p50 := svgchart.Series{Name: "GET p50", Markers: true}
	p99 := svgchart.Series{Name: "GET p99", Markers: true}
	ceil := svgchart.Series{Name: "/healthz p99 (ceiling)", Markers: true}
	rows := slices.Clone(rep.Rows)
	slices.SortStableFunc(rows, func(a, b Row) int { return cmp.Compare(math.Abs(a.Target), math.Abs(b.Target)) })
	saturated, top := 0.0, 0.0
	for _, r := range rows {
		top = max(top, math.Abs(r.Target))
		switch {
		case r.Target > 0:
			p50.Points = append(p50.Points, svgchart.Point{X: r.Target, Y: bench.MsOf(r.P50)})
			p99.Points = append(p99.Points, svgchart.Point{X: r.Target, Y: bench.MsOf(r.P99)})
		case r.Target < 0: // the ceiling at an open-loop rate
			ceil.Points = append(ceil.Points, svgchart.Point{X: -r.Target, Y: bench.MsOf(r.P99)})
		case r.Step == "saturation":
			saturated = r.Rate
		}
	}
	title := "tidemark-lab bench serve: cache-hit GET latency against offered rate\np50 and p99 of each open-loop step; the ceiling is /healthz of the same process"
	c := svgchart.Chart{
		XLabel: "offered requests/s (open loop)",
		YLabel: "latency (log scale)",
		LogY:   true,
		Series: []svgchart.Series{p50, p99, ceil},
		XTick:  bench.RateTick,
		YTick:  bench.MsTick,
	}
	if saturated > 0 {
		title += fmt.Sprintf("; closed loop saturates at %.0f req/s", saturated)
		c.XMax = svgchart.AxisMax(max(saturated, top))
	}
	c.Title = title
	if rep.P99Goal > 0 {
		c.Rules = []svgchart.Rule{{Y: bench.MsOf(rep.P99Goal), Label: "goal: p99 < " + rep.P99Goal.String(), Color: "#dc322f"}}
	}
	return c
}
