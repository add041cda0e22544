package main

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/applybench"
)

// benchApplyCmd wires flags into applybench.Config (lab/bench/applybench)
// and prints the table.
type benchApplyCmd struct {
	Kafka      string        `field:"benchapply.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka brokers; empty starts an in-process kfake."`
	Redis      string        `field:"benchapply.RedisURL" name:"redis" env:"TIDEMARK_REDIS" help:"A standalone Redis (redis://host:port/db) to benchmark; empty starts a private redis-server. Its data is used: point it at a scratch server."`
	Events     int           `field:"benchapply.Events" name:"events" default:"${benchapply_Events}" help:"Events replayed."`
	Keys       int           `field:"benchapply.Keys" name:"keys" default:"${benchapply_Keys}" help:"Keys the replayed events spread over."`
	Partitions int           `field:"benchapply.Partitions" name:"partitions" default:"${benchapply_Partitions}" help:"Partitions of the bench topics."`
	Rate       int           `field:"benchapply.Rate" name:"rate" default:"${benchapply_Rate}" help:"Events/s of the steady latency phase."`
	Duration   time.Duration `field:"benchapply.Duration" name:"duration" default:"${benchapply_Duration}" help:"Length of the steady latency phase."`
	SVG        string        `name:"svg" default:"apply.svg" help:"Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchApplyCmd) config() applybench.Config {
	cfg := applybench.DefaultConfig()
	cfg.Brokers, cfg.RedisURL = cli.SplitList(c.Kafka), c.Redis
	cfg.Events, cfg.Keys, cfg.Partitions, cfg.Rate, cfg.Duration = c.Events, c.Keys, c.Partitions, c.Rate, c.Duration
	return cfg
}

func (c *benchApplyCmd) Validate() error {
	return cli.ValidateOne(c, "benchapply", c.config().Validate())
}

func (c *benchApplyCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := applybench.Run(ctx, c.config(), applybench.Deps{Log: e.Log})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.SVG, applybench.Chart)
}
