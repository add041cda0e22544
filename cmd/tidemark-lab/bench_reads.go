package main

import (
	"context"
	"errors"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/readsbench"
)

// benchReadsCmd binds its flags into readsbench.Config (lab/bench/readsbench) and prints the report.
type benchReadsCmd struct {
	reads readsbench.Config
	svg   string
}

func (c *benchReadsCmd) Bind(b *cli.Binder) {
	c.reads = readsbench.DefaultConfig()
	c.svg = "reads.svg"
	b.EnvPrefix("")
	b.Flag(&c.reads.PG, "pg", "Postgres to use (empty: start a private one, with --redis empty too).").Env("TIDEMARK_PG")
	b.Flag(&c.reads.Redis, "redis", "Redis to use (empty: start a private one). Its command counters are read: point it at a server nothing else uses.").Env("TIDEMARK_REDIS")
	b.Flag(&c.reads.Items, "items", "Items a page's items are drawn from.")
	b.Flag(&c.reads.BatchSize, "batch", "Items per page (1 to 100).")
	b.Flag(&c.reads.Pages, "pages", "Pages in flight (closed loop).")
	b.Flag(&c.reads.Duration, "duration", "Measured time of each mode in each round.")
	b.Flag(&c.reads.Rounds, "rounds", "Rounds of single GETs and one batch GET per page, alternating which goes first; the summary takes medians (0: no page phase).")
	b.Flag(&c.reads.HotGETs, "hot-gets", "GETs of the hot key measured per arm (L1 default and off, replicas off and on; 0: no hot-key phase).")
	b.Flag(&c.reads.HotRounds, "hot-rounds", "Rounds of the hot-key phase's four arms, alternating which replicas arm goes first; the summary takes medians.")
	b.Flag(&c.reads.HotWorkers, "hot-workers", "Connections reading the hot key.")
	b.Flag(&c.reads.HotThreshold, "hot-threshold", "serve's --hot-threshold in the replicas-on arms (reads/s reaching the cache tier).")
	b.Flag(&c.reads.HotReplicas, "hot-replicas", "serve's --hot-replicas in the replicas-on arms.")
	b.Flag(&c.svg, "svg", "Also write the items/s chart (batch against single GETs) here as SVG; empty: no chart.")
}

func (c *benchReadsCmd) Check() error {
	c.reads.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set
	var p config.Problems
	p.Nested("reads", c.reads.Validate())
	return p.Err()
}

func (c *benchReadsCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := readsbench.Run(ctx, c.reads, readsbench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Pages) > 0 || len(res.Hot) > 0 {
		err = errors.Join(err, bench.Print(e.Stdout, res, c.svg, readsbench.Chart))
	}
	return err
}
