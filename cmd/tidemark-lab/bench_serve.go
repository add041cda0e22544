package main

import (
	"context"
	"errors"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/servebench"
)

// benchServeCmd wires flags into servebench.Config (lab/bench/servebench) and prints the report.
type benchServeCmd struct {
	PG          string        `field:"benchserve.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres to use (empty: start a private one, with --redis empty too)."`
	Redis       string        `field:"benchserve.Redis" name:"redis" env:"TIDEMARK_REDIS" help:"Redis to use (empty: start a private one)."`
	Items       int           `field:"benchserve.Items" name:"items" default:"${benchserve_Items}" help:"Items in the zipf-distributed key set."`
	ZipfS       float64       `field:"benchserve.ZipfS" name:"zipf-s" default:"${benchserve_ZipfS}" help:"Zipf exponent (> 1; larger is more skewed)."`
	Warmup      time.Duration `field:"benchserve.Warmup" name:"warmup" default:"${benchserve_Warmup}" help:"Closed-loop warm-up before measuring."`
	Duration    time.Duration `field:"benchserve.Duration" name:"duration" default:"${benchserve_Duration}" help:"Length of each measured step."`
	Concurrency int           `field:"benchserve.Concurrency" name:"concurrency" default:"${benchserve_Concurrency}" help:"Connections of the closed-loop saturation step."`
	Workers     int           `field:"benchserve.Workers" name:"workers" default:"${benchserve_Workers}" help:"Connections of the open-loop steps."`
	Steps       []float64     `field:"benchserve.Steps" name:"steps" default:"${benchserve_Steps}" help:"Open-loop rates as fractions of the saturated rate."`
	P99Goal     time.Duration `field:"benchserve.P99Goal" name:"p99-goal" default:"${benchserve_P99Goal}" help:"Latency goal the report checks."`
	ServeArg    []string      `field:"benchserve.ServeArgs" name:"serve-arg" help:"Extra flag for the serve process (repeatable), e.g. --serve-arg=--l1-size=0."`
	Dir         string        `field:"benchserve.Dir" name:"dir" help:"Directory --profile writes to (created if missing)."`
	Profile     bool          `field:"benchserve.Profile" name:"profile" help:"serve writes its CPU profile of the whole run to <dir>/serve.pprof (needs --dir); read it with go tool pprof -top."`
	SVG         string        `name:"svg" default:"serve.svg" help:"Also write the latency-against-offered-rate chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchServeCmd) config() servebench.Config {
	cfg := servebench.DefaultConfig()
	cfg.Binary, _ = tidemarkBinary()
	cfg.PG, cfg.Redis, cfg.ServeArgs, cfg.Items, cfg.ZipfS = c.PG, c.Redis, c.ServeArg, c.Items, c.ZipfS
	cfg.Warmup, cfg.Duration, cfg.Concurrency, cfg.Workers, cfg.Steps, cfg.P99Goal = c.Warmup, c.Duration, c.Concurrency, c.Workers, c.Steps, c.P99Goal
	cfg.Dir, cfg.Profile = c.Dir, c.Profile
	return cfg
}

func (c *benchServeCmd) Validate() error {
	return cli.ValidateOne(c, "benchserve", c.config().Validate())
}

func (c *benchServeCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := servebench.Run(ctx, c.config(), servebench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Rows) > 0 {
		err = errors.Join(err, bench.Print(e.Stdout, res, c.SVG, servebench.Chart))
	}
	return err
}
