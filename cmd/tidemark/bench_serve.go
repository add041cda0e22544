package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"tidemark/internal/bench"
	"tidemark/internal/bench/serve"
)

// benchServeCmd wires flags into serve.BenchConfig (internal/bench/serve) and prints the report.
type benchServeCmd struct {
	PG          string        `name:"pg" env:"TIDEMARK_PG" help:"Postgres to use (empty: start a private one, with --redis empty too)."`
	Redis       string        `name:"redis" env:"TIDEMARK_REDIS" help:"Redis to use (empty: start a private one)."`
	Items       int           `name:"items" default:"10000" help:"Items in the zipf-distributed key set."`
	ZipfS       float64       `name:"zipf-s" default:"1.1" help:"Zipf exponent (> 1; larger is more skewed)."`
	Warmup      time.Duration `name:"warmup" default:"5s" help:"Closed-loop warm-up before measuring."`
	Duration    time.Duration `name:"duration" default:"10s" help:"Length of each measured step."`
	Concurrency int           `name:"concurrency" default:"32" help:"Connections of the closed-loop saturation step."`
	Workers     int           `name:"workers" default:"128" help:"Connections of the open-loop steps."`
	Steps       []float64     `name:"steps" default:"0.25,0.5,0.7,0.85" help:"Open-loop rates as fractions of the saturated rate."`
	P99Goal     time.Duration `name:"p99-goal" default:"10ms" help:"Latency goal the report checks."`
	ServeArg    []string      `name:"serve-arg" help:"Extra flag for the serve process (repeatable), e.g. --serve-arg=--l1-size=0."`
	SVG         string        `name:"svg" default:"serve.svg" help:"Also write the latency-against-offered-rate chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchServeCmd) config() serve.BenchConfig {
	exe, _ := os.Executable()
	return serve.BenchConfig{PG: c.PG, Redis: c.Redis, Binary: exe, ServeArgs: c.ServeArg, Items: c.Items, ZipfS: c.ZipfS,
		Warmup: c.Warmup, Duration: c.Duration, Concurrency: c.Concurrency, Workers: c.Workers, Steps: c.Steps, P99Goal: c.P99Goal}
}

func (c *benchServeCmd) Validate() error { return c.config().Validate() }

func (c *benchServeCmd) Run(ctx context.Context, e *env) error {
	rep, err := serve.RunBench(ctx, c.config(), e.log.With("component", "bench"), e.stderr)
	if len(rep.Rows) > 0 {
		fmt.Fprint(e.stdout, rep.Markdown())
		err = errors.Join(err, bench.WriteChart(c.SVG, serve.Chart(rep), e.stdout))
	}
	return err
}
