package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/applybench"
)

// benchApplyCmd binds its flags into applybench.Config (lab/bench/applybench)
// and prints the table.
type benchApplyCmd struct {
	apply applybench.Config
	svg   string
}

func (c *benchApplyCmd) Bind(b *cli.Binder) {
	c.apply = applybench.DefaultConfig()
	c.svg = "apply.svg"
	b.EnvPrefix("")
	b.Flag(&c.apply.Brokers, "kafka", "Kafka brokers; empty starts an in-process kfake.").Env("TIDEMARK_KAFKA")
	b.Flag(&c.apply.RedisURL, "redis", "A standalone Redis (redis://host:port/db) to benchmark; empty starts a private redis-server. Its data is used: point it at a scratch server.").Env("TIDEMARK_REDIS")
	b.Flag(&c.apply.Events, "events", "Events replayed.")
	b.Flag(&c.apply.Keys, "keys", "Keys the replayed events spread over.")
	b.Flag(&c.apply.Partitions, "partitions", "Partitions of the bench topics.")
	b.Flag(&c.apply.Rate, "rate", "Events/s of the steady latency phase.")
	b.Flag(&c.apply.Duration, "duration", "Length of the steady latency phase.")
	b.Flag(&c.svg, "svg", "Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchApplyCmd) Check() error {
	var p config.Problems
	p.Nested("apply", c.apply.Validate())
	return p.Err()
}

func (c *benchApplyCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := applybench.Run(ctx, c.apply, applybench.Deps{Log: e.Log})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.svg, applybench.Chart)
}
