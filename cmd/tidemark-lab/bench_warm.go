package main

import (
	"context"
	"errors"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/warmbench"
)

// benchWarmCmd binds its flags into warmbench.Config (lab/bench/warmbench) and prints the report.
type benchWarmCmd struct {
	warm warmbench.Config
	svg  string
}

func (c *benchWarmCmd) Bind(b *cli.Binder) {
	c.warm = warmbench.DefaultConfig()
	c.svg = "warm.svg"
	b.EnvPrefix("")
	b.Flag(&c.warm.Items, "items", "Items in the zipf-distributed key set (one tenant).")
	b.Flag(&c.warm.Zipf, "zipf-s", "Zipf exponent (> 1; larger is more skewed).")
	b.Flag(&c.warm.Clients, "clients", "Closed-loop GET connections, spread over the serve processes.")
	b.Flag(&c.warm.Serves, "serves", "tidemark serve processes.")
	b.Flag(&c.warm.ForegroundRate, "foreground-rate", "Source budget of the request path, reads/s over all serve processes.")
	b.Flag(&c.warm.BackgroundRate, "background-rate", "Source budget of the background class (the warmer's ceiling), reads/s.")
	b.Flag(&c.warm.WarmTop, "warm-top", "Hottest keys the warmer fills after the kill.")
	b.Flag(&c.warm.Prime, "prime", "Read every item once before the load, so the whole catalog is cached before the kill.")
	b.Flag(&c.warm.Warmup, "warmup", "Load before each kill.")
	b.Flag(&c.warm.Observe, "observe", "How long each arm watches the recovery.")
	b.Flag(&c.warm.Window, "window", "Hit-ratio and source-rate window.")
	b.Flag(&c.svg, "svg", "Also write the hit-ratio-after-the-kill chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchWarmCmd) Check() error {
	c.warm.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set
	var p config.Problems
	p.Nested("warm", c.warm.Validate())
	return p.Err()
}

func (c *benchWarmCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := warmbench.Run(ctx, c.warm, warmbench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Arms) > 0 {
		err = errors.Join(err, bench.Print(e.Stdout, res, c.svg, warmbench.Chart))
	}
	return err
}
