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
	DataDir     string  `field:"dev.DataDir" name:"data-dir" env:"TIDEMARK_DATA_DIR" default:"${dev_DataDir}" help:"Private servers' data (Postgres, Redis, Kafka) and demo keys; reused on the next start."`
	PG          string  `name:"pg" env:"TIDEMARK_PG" help:"Use this catalog database instead of a private Postgres."`
	Redis       string  `name:"redis" env:"TIDEMARK_REDIS" help:"Use this cache tier instead of a private redis-server."`
	Kafka       string  `name:"kafka" env:"TIDEMARK_KAFKA" help:"Use these Kafka brokers instead of an embedded one."`
	SyncWrites  bool    `field:"dev.SyncWrites" name:"sync-writes" env:"TIDEMARK_KAFKA_SYNC_WRITES" help:"The embedded broker fsyncs every produced batch before acknowledging it (survives a machine crash; slower). Default: page cache, fsync on segment roll and shutdown (survives kill -9)."`
	APIAddr     string  `field:"dev.Pipeline.APIAddr" name:"api-addr" env:"TIDEMARK_API_ADDR" default:"${dev_Pipeline_APIAddr}" help:"Where the catalog API listens."`
	MetricsAddr string  `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9100" help:"Serve /metrics, /healthz, /readyz here."`
	DemoLoad    float64 `field:"dev.DemoLoad" name:"demo-load" env:"TIDEMARK_DEMO_LOAD" default:"${dev_DemoLoad}" help:"Requests/s of demo traffic against the API (1 in 10 a merchant update, the rest zipf visitor reads); 0: none."`
	Topic       string  `field:"dev.Pipeline.Topic" name:"topic" env:"TIDEMARK_TOPIC" default:"${dev_Pipeline_Topic}" help:"Kafka topic."`
	Namespace   string  `field:"dev.Pipeline.Cache.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${dev_Pipeline_Cache_Namespace}" help:"Cache-tier key namespace."`
	Partitions  int     `field:"dev.Pipeline.Partitions" name:"partitions" env:"TIDEMARK_PARTITIONS" default:"${dev_Pipeline_Partitions}" help:"Partitions of the topic when it is created."`
	cli.CacheFlags
}

func (c *devCmd) config() dev.Config {
	cfg := dev.DefaultConfig()
	cfg.DataDir, cfg.PG, cfg.Redis = c.DataDir, c.PG, c.Redis
	cfg.Kafka, cfg.SyncWrites = cli.SplitList(c.Kafka), c.SyncWrites
	cfg.MetricsAddr, cfg.DemoLoad = c.MetricsAddr, c.DemoLoad
	cfg.Pipeline.APIAddr, cfg.Pipeline.Topic, cfg.Pipeline.Namespace, cfg.Pipeline.Partitions = c.APIAddr, c.Topic, c.Namespace, c.Partitions
	cfg.Pipeline.Cache = c.CacheTier(c.Namespace)
	return cfg
}

func (c *devCmd) Validate() error {
	var p config.Problems
	cli.ValidateAs(&p, "dev", c.config().Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *devCmd) Run(ctx context.Context, e *cli.Env) error {
	d, err := dev.New(c.config(), dev.Deps{Log: e.Log, Out: e.Stdout, Terminal: e.Stdout == os.Stdout && term.IsTerminal(int(os.Stdout.Fd()))})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}
