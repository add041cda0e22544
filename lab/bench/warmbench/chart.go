package warmbench

import (
	"fmt"
	"math"

	"github.com/tidemark/tidemark/internal/svgchart"
)

// Chart is the recovery chart of a run: each arm's hit ratio per window
// against the time since redis-server was killed, with the 90 % of its
// pre-kill hit ratio that TimeTo90 waits for. A window without GETs is a gap.
func Chart(res Result) svgchart.Chart {
	cfg := res.Config
	var series []svgchart.Series
	var rules []svgchart.Rule
	for _, a := range res.Arms {
		s := svgchart.Series{Name: "hit ratio, warmer " + onOff(a.Warmer), Markers: true}
		for _, w := range a.Windows {
			y := math.NaN()
			if w.Total > 0 {
				y = 100 * float64(w.Hits) / float64(w.Total)
			}
			s.Points = append(s.Points, svgchart.Point{X: w.At.Seconds(), Y: y})
		}
		series = append(series, s)
		rules = append(rules, svgchart.Rule{Y: 90 * a.HitBefore, Label: "90 % of before, warmer " + onOff(a.Warmer)})
	}
	return svgchart.Chart{
		Title: fmt.Sprintf("tidemark-lab bench warm: hit ratio after redis-server is killed, with and without the warmer\n"+
			"%d items, zipf s=%.2f, %d serve processes, %s windows", cfg.Items, cfg.Zipf, cfg.Serves, cfg.Window),
		XLabel: "seconds since the kill",
		YLabel: "hit ratio %",
		Series: series,
		Rules:  rules,
		YTick:  func(y float64) string { return fmt.Sprintf("%.0f %%", y) },
	}
}
