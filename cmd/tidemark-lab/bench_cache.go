package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/cachebench"
)

// benchCacheCmd binds its flags into cachebench.Config; the benchmark itself
// lives in lab/bench/cachebench.
type benchCacheCmd struct {
	cache cachebench.Config
	svg   string
}

func (c *benchCacheCmd) Bind(b *cli.Binder) {
	c.cache = cachebench.DefaultConfig()
	c.svg = "cache.svg"
	b.EnvPrefix("")
	b.Flag(&c.cache.RedisURL, "redis", "Redis to benchmark (redis://host:port/db, or comma-separated Cluster seeds); empty starts a private redis-server from PATH. Keys go to the tidemark-bench namespace and expire by themselves.").Env("TIDEMARK_REDIS")
	b.Flag(&c.cache.Keys, "keys", "Keys invalidated per round (and -n of the pipelined redis-benchmark runs).")
	b.Flag(&c.cache.Batch, "batch", "Invalidations per InvalidateBatch call.")
	b.Flag(&c.cache.Workers, "workers", "Concurrent InvalidateBatch callers (an applier runs one per partition).")
	b.Flag(&c.cache.Lookups, "lookups", "Sequential hit lookups timed (and -n of the latency redis-benchmark runs).")
	b.Flag(&c.cache.Clients, "clients", "redis-benchmark -c for the pipelined ceilings.")
	b.Flag(&c.cache.Pipeline, "pipeline", "redis-benchmark -P for the pipelined ceilings.")
	b.Flag(&c.cache.Rounds, "rounds", "Rounds, each measuring tidemark beside its ceilings; the table shows medians.")
	b.Flag(&c.cache.BenchmarkPath, "redis-benchmark", "redis-benchmark binary.")
	b.Flag(&c.svg, "svg", "Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchCacheCmd) Check() error {
	var p config.Problems
	p.Nested("cache", c.cache.Validate())
	return p.Err()
}

func (c *benchCacheCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := cachebench.Run(ctx, c.cache, cachebench.Deps{})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.svg, cachebench.Chart)
}
