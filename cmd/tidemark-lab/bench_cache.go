package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/cachebench"
)

// benchCacheCmd wires flags into cachebench.Config; the benchmark itself
// lives in lab/bench/cachebench.
type benchCacheCmd struct {
	Redis          string `field:"benchcache.RedisURL" name:"redis" env:"TIDEMARK_REDIS" help:"Redis to benchmark (redis://host:port/db, or comma-separated Cluster seeds); empty starts a private redis-server from PATH. Keys go to the tidemark-bench namespace and expire by themselves."`
	Keys           int    `field:"benchcache.Keys" name:"keys" default:"${benchcache_Keys}" help:"Keys invalidated per round (and -n of the pipelined redis-benchmark runs)."`
	Batch          int    `field:"benchcache.Batch" name:"batch" default:"${benchcache_Batch}" help:"Invalidations per InvalidateBatch call."`
	Workers        int    `field:"benchcache.Workers" name:"workers" default:"${benchcache_Workers}" help:"Concurrent InvalidateBatch callers (an applier runs one per partition)."`
	Lookups        int    `field:"benchcache.Lookups" name:"lookups" default:"${benchcache_Lookups}" help:"Sequential hit lookups timed (and -n of the latency redis-benchmark runs)."`
	Clients        int    `field:"benchcache.Clients" name:"clients" default:"${benchcache_Clients}" help:"redis-benchmark -c for the pipelined ceilings."`
	Pipeline       int    `field:"benchcache.Pipeline" name:"pipeline" default:"${benchcache_Pipeline}" help:"redis-benchmark -P for the pipelined ceilings."`
	Rounds         int    `field:"benchcache.Rounds" name:"rounds" default:"${benchcache_Rounds}" help:"Rounds, each measuring tidemark beside its ceilings; the table shows medians."`
	RedisBenchmark string `field:"benchcache.BenchmarkPath" name:"redis-benchmark" default:"${benchcache_BenchmarkPath}" help:"redis-benchmark binary."`
	SVG            string `name:"svg" default:"cache.svg" help:"Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchCacheCmd) config() cachebench.Config {
	return cachebench.Config{
		RedisURL: c.Redis, Keys: c.Keys, Batch: c.Batch, Workers: c.Workers, Lookups: c.Lookups,
		Clients: c.Clients, Pipeline: c.Pipeline, BenchmarkPath: c.RedisBenchmark, Rounds: c.Rounds,
	}
}

func (c *benchCacheCmd) Validate() error {
	return cli.ValidateOne(c, "benchcache", c.config().Validate())
}

func (c *benchCacheCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := cachebench.Run(ctx, c.config(), cachebench.Deps{})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.SVG, cachebench.Chart)
}
