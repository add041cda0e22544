package main

import (
	"context"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/status"
)

type statusCmd struct {
	status status.Config
	redis  cache.RedisConfig
	json   bool
}

func (c *statusCmd) Bind(b *cli.Binder) {
	c.status, c.redis = status.DefaultConfig(), cache.DefaultRedisConfig()
	s := &c.status
	b.Flag(&s.Brokers, "kafka", "Kafka bootstrap brokers, comma-separated.")
	cli.RedisFlags(b, &c.redis, "Cache tier URL.")
	b.Flag(&s.PG, "pg", "Postgres DSN (optional): adds slot lag and wal_status, and the serve processes registered on the source.")
	b.Flag(&s.Topic, "topic", "Kafka topic.")
	b.Flag(&s.Group, "group", "The applier's consumer group.")
	b.Flag(&s.Namespace, "namespace", "Cache-tier key namespace.")
	b.Flag(&s.SourcePool, "source-pool", "The serve processes' --source-pool, which names the rollout settings (empty: serve's default).")
	b.Flag(&s.Slot, "slot", "Replication slot (with --pg).")
	b.Flag(&s.SLO, "slo", "Freshness SLO: BREACHED when the watermark is older.")
	b.Flag(&s.Warn, "warn", "AT RISK when the watermark is older than this (at least 3.5s: an idle pipeline's watermark ages that far between heartbeats).")
	b.Flag(&s.Timeout, "timeout", "Give up reading after this long (exit 2).").Env("TIDEMARK_STATUS_TIMEOUT")
	cli.KafkaFlags(b, &s.Kafka)
	b.Flag(&c.json, "json", "Print the report as JSON.").Env("")
	b.Derive(&s.Redis, &c.redis.URL)
	b.Derive(&s.RedisConn, &c.redis)
}

func (c *statusCmd) Check() error {
	var p config.Problems
	p.Nested("status", c.status.Validate())
	cli.CheckRedis(&p, c.redis)
	return p.Err()
}

// Run exits 0 when OK, 1 when AT RISK or BREACHED, 2 when the state could
// not be read: the contract deploy scripts and alerts gate on.
func (c *statusCmd) Run(ctx context.Context, e *cli.Env) error {
	rep, err := status.Check(ctx, c.status)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "status: could not read the pipeline's state: " + err.Error()}
	}
	if err := cli.WriteReport(e.Stdout, rep, c.json); err != nil {
		return err
	}
	if rep.Verdict != status.OK {
		return &cli.ExitError{Code: cli.ExitFailure}
	}
	return nil
}
