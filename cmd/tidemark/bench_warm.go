package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"tidemark/internal/bench"
	"tidemark/internal/bench/warm"
)

// benchWarmCmd wires flags into warm.Config (internal/bench/warm) and prints the report.
type benchWarmCmd struct {
	Items          int           `name:"items" default:"20000" help:"Items in the zipf-distributed key set (one tenant)."`
	ZipfS          float64       `name:"zipf-s" default:"1.1" help:"Zipf exponent (> 1; larger is more skewed)."`
	Clients        int           `name:"clients" default:"16" help:"Closed-loop GET connections, spread over the serve processes."`
	Serves         int           `name:"serves" default:"2" help:"tidemark serve processes."`
	ForegroundRate float64       `name:"foreground-rate" default:"100" help:"Source budget of the request path, reads/s over all serve processes."`
	BackgroundRate float64       `name:"background-rate" default:"400" help:"Source budget of the background class (the warmer's ceiling), reads/s."`
	WarmTop        int           `name:"warm-top" default:"5000" help:"Hottest keys the warmer fills after the kill."`
	Warmup         time.Duration `name:"warmup" default:"30s" help:"Load before each kill."`
	Observe        time.Duration `name:"observe" default:"60s" help:"How long each arm watches the recovery."`
	Window         time.Duration `name:"window" default:"1s" help:"Hit-ratio and source-rate window."`
	SVG            string        `name:"svg" default:"warm.svg" help:"Also write the hit-ratio-after-the-kill chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchWarmCmd) config() warm.Config {
	exe, _ := os.Executable()
	return warm.Config{Binary: exe, Items: c.Items, Zipf: c.ZipfS, Clients: c.Clients, Serves: c.Serves,
		ForegroundRate: c.ForegroundRate, BackgroundRate: c.BackgroundRate, WarmTop: c.WarmTop,
		Warmup: c.Warmup, Observe: c.Observe, Window: c.Window}
}

func (c *benchWarmCmd) Validate() error { return c.config().Validate() }

func (c *benchWarmCmd) Run(ctx context.Context, e *env) error {
	cfg := c.config()
	res, err := warm.Run(ctx, cfg, e.log.With("component", "bench"), e.stderr)
	if len(res.Arms) > 0 {
		fmt.Fprint(e.stdout, res.Markdown(cfg))
		err = errors.Join(err, bench.WriteChart(c.SVG, warm.Chart(cfg, res), e.stdout))
	}
	return err
}
