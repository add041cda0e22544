package main

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/status"
)

type statusCmd struct {
	Kafka     string        `field:"status.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated."`
	Redis     string        `field:"status.Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	PG        string        `field:"status.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres DSN (optional): adds slot lag and wal_status."`
	Topic     string        `field:"status.Topic" name:"topic" env:"TIDEMARK_TOPIC" default:"${status_Topic}" help:"Kafka topic."`
	Group     string        `field:"status.Group" name:"group" env:"TIDEMARK_GROUP" default:"${status_Group}" help:"The applier's consumer group."`
	Namespace string        `field:"status.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${status_Namespace}" help:"Cache-tier key namespace."`
	Pool      string        `field:"status.SourcePool" name:"source-pool" env:"TIDEMARK_SOURCE_POOL" help:"The serve processes' --source-pool, which names the rollout settings (empty: serve's default)."`
	Slot      string        `field:"status.Slot" name:"slot" env:"TIDEMARK_SLOT" default:"${status_Slot}" help:"Replication slot (with --pg)."`
	SLO       time.Duration `field:"status.SLO" name:"slo" env:"TIDEMARK_SLO" default:"${status_SLO}" help:"Freshness SLO: BREACHED when the watermark is older."`
	Warn      time.Duration `field:"status.Warn" name:"warn" env:"TIDEMARK_WARN" default:"${status_Warn}" help:"AT RISK when the watermark is older than this."`
	Timeout   time.Duration `field:"status.Timeout" name:"timeout" env:"TIDEMARK_STATUS_TIMEOUT" default:"${status_Timeout}" help:"Give up reading after this long (exit 2)."`
	cli.KafkaFlags
	cli.RedisFlags
	JSON bool `name:"json" help:"Print the report as JSON."`
}

func (c *statusCmd) config() status.Config {
	return status.Config{Brokers: cli.SplitList(c.Kafka), Kafka: c.KafkaConn(), Redis: c.Redis, RedisConn: c.RedisConn(c.Redis), PG: c.PG, Topic: c.Topic, Group: c.Group,
		Namespace: c.Namespace, SourcePool: c.Pool, Slot: c.Slot, SLO: c.SLO, Warn: c.Warn, Timeout: c.Timeout}
}

func (c *statusCmd) Validate() error {
	var p config.Problems
	cli.ValidateAs(&p, "status", c.config().Validate())
	c.ValidateRedis(&p, c.Redis)
	return cli.FlagErrors(c, p.Err())
}

// Run exits 0 when OK, 1 when AT RISK or BREACHED, 2 when the state could
// not be read: the contract deploy scripts and alerts gate on.
func (c *statusCmd) Run(ctx context.Context, e *cli.Env) error {
	rep, err := status.Check(ctx, c.config())
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "status: could not read the pipeline's state: " + err.Error()}
	}
	if err := cli.WriteReport(e.Stdout, rep, c.JSON); err != nil {
		return err
	}
	if rep.Verdict != status.OK {
		return &cli.ExitError{Code: cli.ExitFailure}
	}
	return nil
}
