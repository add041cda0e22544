package main

import (
	"context"
	"errors"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench/hopbench"
)

// benchHopCmd binds its flags into hopbench.Config (lab/bench/hopbench) and prints the report.
type benchHopCmd struct {
	hop hopbench.Config
}

func (c *benchHopCmd) Bind(b *cli.Binder) {
	c.hop = hopbench.DefaultConfig()
	b.EnvPrefix("")
	b.Flag(&c.hop.Brokers, "kafka", "Kafka brokers, host:port, plaintext (start one with `tidemark-lab kafka`).")
	b.Flag(&c.hop.Rate, "rate", "Records per second, open loop.")
	b.Flag(&c.hop.Warmup, "warmup", "Records sent at the rate before each arm's timed ones, untimed.")
	b.Flag(&c.hop.Duration, "duration", "Length of each arm's timed part.")
	b.Flag(&c.hop.Partitions, "partitions", "Partitions of each arm's new topic.")
	b.Flag(&c.hop.Lingers, "lingers", "Producer linger of each arm (capture's default first).")
	b.Flag(&c.hop.FetchWait, "fetch-wait", "The consumer's fetch max wait.")
}

func (c *benchHopCmd) Check() error {
	var p config.Problems
	p.Nested("hop", c.hop.Validate())
	return p.Err()
}

func (c *benchHopCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := hopbench.Run(ctx, c.hop, hopbench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Arms) > 0 {
		err = errors.Join(err, res.WriteTable(e.Stdout))
	}
	return err
}
