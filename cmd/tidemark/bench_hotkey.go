package main

import (
	"context"
	"time"

	hotkeybench "tidemark/internal/bench/hotkey"
)

// benchHotkeyCmd wires flags into hotkeybench.BenchConfig.
type benchHotkeyCmd struct {
	Redis     string        `name:"redis" env:"TIDEMARK_REDIS" help:"Redis Cluster to benchmark (comma-separated seeds); empty starts a private cluster of --masters redis-servers from PATH. Keys go to the tidemark-bench namespace and expire by themselves."`
	Masters   int           `name:"masters" default:"3" help:"Masters of the private cluster."`
	Replicas  int           `name:"replicas" default:"3" help:"Copies of the hot key in the replicas-on mode."`
	Workers   int           `name:"workers" default:"32" help:"Concurrent closed-loop readers of the one key."`
	Processes int           `name:"processes" default:"4" help:"Serve processes the readers are spread over (each holds its own replica manifests)."`
	Duration  time.Duration `name:"duration" default:"4s" help:"Measured time of each mode in each round."`
	Load      float64       `name:"load" default:"0.9" help:"Offered rate of both modes as a share of the round's closed-loop ceiling with replicas off."`
	Rounds    int           `name:"rounds" default:"3" help:"Rounds of replicas off then on; the table shows medians."`
	SVG       string        `name:"svg" default:"hotkey.svg" help:"Also write the per-master command-rate chart here as SVG; empty: no chart."`
}

func (c *benchHotkeyCmd) config() hotkeybench.BenchConfig {
	return hotkeybench.BenchConfig{RedisURL: c.Redis, Masters: c.Masters, Replicas: c.Replicas, Workers: c.Workers,
		Processes: c.Processes, Duration: c.Duration, Load: c.Load, Rounds: c.Rounds, SVG: c.SVG}
}

func (c *benchHotkeyCmd) Validate() error { return c.config().Validate() }

func (c *benchHotkeyCmd) Run(ctx context.Context, e *env) error {
	return hotkeybench.RunBench(ctx, c.config(), e.stdout)
}
