package main

import (
	"context"
	"errors"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/servebench"
)

// benchServeCmd binds its flags into servebench.Config (lab/bench/servebench) and prints the report.
type benchServeCmd struct {
	serve servebench.Config
	svg   string
}

func (c *benchServeCmd) Bind(b *cli.Binder) {
	c.serve = servebench.DefaultConfig()
	c.svg = "serve.svg"
	b.EnvPrefix("")
	b.Flag(&c.serve.PG, "pg", "Postgres to use (empty: start a private one, with --redis empty too).").Env("TIDEMARK_PG")
	b.Flag(&c.serve.Redis, "redis", "Redis to use (empty: start a private one).").Env("TIDEMARK_REDIS")
	b.Flag(&c.serve.Items, "items", "Items in the zipf-distributed key set.")
	b.Flag(&c.serve.ZipfS, "zipf-s", "Zipf exponent (> 1; larger is more skewed).")
	b.Flag(&c.serve.Warmup, "warmup", "Closed-loop warm-up before measuring.")
	b.Flag(&c.serve.Duration, "duration", "Length of each measured step.")
	b.Flag(&c.serve.Concurrency, "concurrency", "Connections of the closed-loop saturation step.")
	b.Flag(&c.serve.Workers, "workers", "Connections of the open-loop steps.")
	b.Flag(&c.serve.Steps, "steps", "Open-loop rates as fractions of the saturated rate.")
	b.Flag(&c.serve.Climb, "climb", "After the steps, offer this factor more per step while a step meets the goal (serve, then /healthz), so each side's limit is bracketed by a step that missed; 0: stop at the steps.")
	b.Flag(&c.serve.P99Goal, "p99-goal", "Latency goal the report checks.")
	b.Flag(&c.serve.ServeArgs, "serve-arg", "Extra flag for the serve process (repeatable), e.g. --serve-arg=--l1-size=0.")
	b.Flag(&c.serve.Dir, "dir", "Directory --profile writes to (created if missing).")
	b.Flag(&c.serve.Profile, "profile", "serve writes its CPU profile of the whole run to <dir>/serve.pprof (needs --dir); read it with go tool pprof -top.")
	b.Flag(&c.svg, "svg", "Also write the latency-against-offered-rate chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchServeCmd) Check() error {
	c.serve.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set
	var p config.Problems
	p.Nested("serve", c.serve.Validate())
	return p.Err()
}

func (c *benchServeCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := servebench.Run(ctx, c.serve, servebench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Rows) > 0 {
		err = errors.Join(err, bench.Print(e.Stdout, res, c.svg, servebench.Chart))
	}
	return err
}
