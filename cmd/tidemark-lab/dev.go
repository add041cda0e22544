package main

import (
	"context"
	"os"

	"golang.org/x/term"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/dev"
)

type devCmd struct {
	dev dev.Config
}

func (c *devCmd) Bind(b *cli.Binder) {
	c.dev = dev.DefaultConfig()
	d, pl := &c.dev, &c.dev.Pipeline
	b.Flag(&d.DataDir, "data-dir", "Private servers' data (Postgres, Redis, Kafka) and demo keys; reused on the next start.")
	b.Flag(&d.PG, "pg", "Use this catalog database instead of a private Postgres.")
	b.Flag(&d.Redis, "redis", "Use this cache tier instead of a private redis-server.")
	b.Flag(&d.Kafka, "kafka", "Use these Kafka brokers instead of an embedded one.")
	b.Flag(&d.SyncWrites, "sync-writes", "The embedded broker fsyncs every produced batch before acknowledging it (survives a machine crash; slower). Default: page cache, fsync on segment roll and shutdown (survives kill -9).").Env("TIDEMARK_KAFKA_SYNC_WRITES")
	b.Flag(&pl.APIAddr, "api-addr", "Where the catalog API listens.")
	b.Flag(&d.MetricsAddr, "metrics-addr", "Serve /metrics, /healthz, /readyz here.")
	b.Flag(&d.DemoLoad, "demo-load", "Requests/s of demo traffic against the API (1 in 10 a merchant update, the rest zipf visitor reads); 0: none.")
	b.Flag(&pl.Topic, "topic", "Kafka topic.")
	b.Flag(&pl.Namespace, "namespace", "Cache-tier key namespace.")
	b.Flag(&pl.Partitions, "partitions", "Partitions of the topic when it is created.")
	cli.CacheFlags(b, &pl.Cache)
	b.Derive(&pl.Cache.Namespace, &pl.Namespace)
}

func (c *devCmd) Check() error {
	var p config.Problems
	p.Nested("dev", c.dev.Validate())
	return p.Err()
}

func (c *devCmd) Run(ctx context.Context, e *cli.Env) error {
	d, err := dev.New(c.dev, dev.Deps{Log: e.Log, Out: e.Stdout, Terminal: e.Stdout == os.Stdout && term.IsTerminal(int(os.Stdout.Fd()))})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}
