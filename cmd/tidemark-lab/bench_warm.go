package main

import (
	"context"
	"errors"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/warmbench"
)

// benchWarmCmd wires flags into warmbench.Config (lab/bench/warmbench) and prints the report.
type benchWarmCmd struct {
	Items          int           `field:"benchwarm.Items" name:"items" default:"${benchwarm_Items}" help:"Items in the zipf-distributed key set (one tenant)."`
	ZipfS          float64       `field:"benchwarm.Zipf" name:"zipf-s" default:"${benchwarm_Zipf}" help:"Zipf exponent (> 1; larger is more skewed)."`
	Clients        int           `field:"benchwarm.Clients" name:"clients" default:"${benchwarm_Clients}" help:"Closed-loop GET connections, spread over the serve processes."`
	Serves         int           `field:"benchwarm.Serves" name:"serves" default:"${benchwarm_Serves}" help:"tidemark serve processes."`
	ForegroundRate float64       `field:"benchwarm.ForegroundRate" name:"foreground-rate" default:"${benchwarm_ForegroundRate}" help:"Source budget of the request path, reads/s over all serve processes."`
	BackgroundRate float64       `field:"benchwarm.BackgroundRate" name:"background-rate" default:"${benchwarm_BackgroundRate}" help:"Source budget of the background class (the warmer's ceiling), reads/s."`
	WarmTop        int           `field:"benchwarm.WarmTop" name:"warm-top" default:"${benchwarm_WarmTop}" help:"Hottest keys the warmer fills after the kill."`
	Prime          bool          `field:"benchwarm.Prime" name:"prime" help:"Read every item once before the load, so the whole catalog is cached before the kill."`
	Warmup         time.Duration `field:"benchwarm.Warmup" name:"warmup" default:"${benchwarm_Warmup}" help:"Load before each kill."`
	Observe        time.Duration `field:"benchwarm.Observe" name:"observe" default:"${benchwarm_Observe}" help:"How long each arm watches the recovery."`
	Window         time.Duration `field:"benchwarm.Window" name:"window" default:"${benchwarm_Window}" help:"Hit-ratio and source-rate window."`
	SVG            string        `name:"svg" default:"warm.svg" help:"Also write the hit-ratio-after-the-kill chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchWarmCmd) config() warmbench.Config {
	cfg := warmbench.DefaultConfig()
	cfg.Binary, _ = tidemarkBinary()
	cfg.Items, cfg.Zipf, cfg.Clients, cfg.Serves = c.Items, c.ZipfS, c.Clients, c.Serves
	cfg.ForegroundRate, cfg.BackgroundRate, cfg.WarmTop = c.ForegroundRate, c.BackgroundRate, c.WarmTop
	cfg.Prime, cfg.Warmup, cfg.Observe, cfg.Window = c.Prime, c.Warmup, c.Observe, c.Window
	return cfg
}

func (c *benchWarmCmd) Validate() error {
	return cli.ValidateOne(c, "benchwarm", c.config().Validate())
}

func (c *benchWarmCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := warmbench.Run(ctx, c.config(), warmbench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Arms) > 0 {
		err = errors.Join(err, bench.Print(e.Stdout, res, c.SVG, warmbench.Chart))
	}
	return err
}
