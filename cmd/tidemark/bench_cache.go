package main

import (
	"context"

	cachebench "tidemark/internal/bench/cache"
)

// benchCacheCmd wires flags into cachebench.BenchConfig; the benchmark itself
// lives in the cache package.
type benchCacheCmd struct {
	Redis          string `name:"redis" env:"TIDEMARK_REDIS" help:"Redis to benchmark (redis://host:port/db, or comma-separated Cluster seeds); empty starts a private redis-server from PATH. Keys go to the tidemark-bench namespace and expire by themselves."`
	Keys           int    `name:"keys" default:"200000" help:"Keys invalidated per round (and -n of the pipelined redis-benchmark runs)."`
	Batch          int    `name:"batch" default:"500" help:"Invalidations per InvalidateBatch call."`
	Workers        int    `name:"workers" default:"4" help:"Concurrent InvalidateBatch callers (an applier runs one per partition)."`
	Lookups        int    `name:"lookups" default:"20000" help:"Sequential hit lookups timed (and -n of the latency redis-benchmark runs)."`
	Clients        int    `name:"clients" default:"50" help:"redis-benchmark -c for the pipelined ceilings."`
	Pipeline       int    `name:"pipeline" default:"100" help:"redis-benchmark -P for the pipelined ceilings."`
	Rounds         int    `name:"rounds" default:"5" help:"Rounds, each measuring tidemark beside its ceilings; the table shows medians."`
	RedisBenchmark string `name:"redis-benchmark" default:"redis-benchmark" help:"redis-benchmark binary."`
	SVG            string `name:"svg" default:"cache.svg" help:"Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchCacheCmd) config() cachebench.BenchConfig {
	return cachebench.BenchConfig{
		RedisURL: c.Redis, Keys: c.Keys, Batch: c.Batch, Workers: c.Workers, Lookups: c.Lookups,
		Clients: c.Clients, Pipeline: c.Pipeline, BenchmarkPath: c.RedisBenchmark, Rounds: c.Rounds, SVG: c.SVG,
	}
}

func (c *benchCacheCmd) Validate() error { return c.config().Validate() }

func (c *benchCacheCmd) Run(ctx context.Context, e *env) error {
	return cachebench.RunBench(ctx, c.config(), e.stdout)
}
