package main

import (
	"context"
	"time"

	"tidemark/status"
)

type statusCmd struct {
	Kafka     string        `name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated."`
	Redis     string        `name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	PG        string        `name:"pg" env:"TIDEMARK_PG" help:"Postgres DSN (optional): adds slot lag and wal_status."`
	Topic     string        `name:"topic" env:"TIDEMARK_TOPIC" default:"tidemark.invalidations" help:"Kafka topic."`
	Group     string        `name:"group" env:"TIDEMARK_GROUP" default:"tidemark-applier" help:"The applier's consumer group."`
	Namespace string        `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"catalog" help:"Cache-tier key namespace."`
	Slot      string        `name:"slot" env:"TIDEMARK_SLOT" default:"tidemark" help:"Replication slot (with --pg)."`
	SLO       time.Duration `name:"slo" env:"TIDEMARK_SLO" default:"30s" help:"Freshness SLO: BREACHED when the watermark is older."`
	Warn      time.Duration `name:"warn" env:"TIDEMARK_WARN" default:"5s" help:"AT RISK when the watermark is older than this."`
	Timeout   time.Duration `name:"timeout" env:"TIDEMARK_STATUS_TIMEOUT" default:"10s" help:"Give up reading after this long (exit 2)."`
	JSON      bool          `name:"json" help:"Print the report as JSON."`
}

func (c *statusCmd) config() status.Config {
	return status.Config{Brokers: splitList(c.Kafka), Redis: c.Redis, PG: c.PG, Topic: c.Topic, Group: c.Group,
		Namespace: c.Namespace, Slot: c.Slot, SLO: c.SLO, Warn: c.Warn, Timeout: c.Timeout}
}

func (c *statusCmd) Validate() error { return c.config().Validate() }

// Run exits 0 when OK, 1 when AT RISK or BREACHED, 2 when the state could
// not be read: the contract deploy scripts and alerts gate on.
func (c *statusCmd) Run(ctx context.Context, e *env) error {
	rep, err := status.Check(ctx, c.config())
	if err != nil {
		return &exitError{code: exitUnreadable, msg: "status: could not read the pipeline's state: " + err.Error()}
	}
	if c.JSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return err
	}
	if rep.Verdict != status.OK {
		return &exitError{code: exitFailure}
	}
	return nil
}
