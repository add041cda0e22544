package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/broker"
)

type kafkaCmd struct {
	broker broker.Config
}

func (c *kafkaCmd) Bind(b *cli.Binder) {
	c.broker = broker.DefaultConfig()
	k := &c.broker
	b.EnvPrefix("TIDEMARK_KAFKA_")
	b.Flag(&k.DataDir, "data-dir", "Persist topics and offsets here (page cache, fsync on segment roll and shutdown: survives kill -9, not a machine crash); empty keeps them in memory.")
	b.Flag(&k.SyncWrites, "sync-writes", "Fsync every produced batch before acknowledging it (survives a machine crash; every produce waits for the disk). Embedded broker only.")
	b.Flag(&k.Port, "port", "Port of the first broker; broker i listens on port+i.")
	b.Flag(&k.Brokers, "brokers", "Number of brokers.")
	b.Flag(&k.Partitions, "partitions", "Partitions of auto-created topics.")
	b.Flag(&k.Real, "real", "Run Apache Kafka itself (KRaft; a JVM per broker, Java 17+; fetched with Maven on first use) instead of kfake; broker i listens on port+i, its controller on port+brokers+i.")
	b.Flag(&k.SASLDir, "sasl-dir", "With --real: also serve SASL_SSL (SCRAM-SHA-512, OAUTHBEARER) with ACLs enforced, its CA and certificates made in this directory.")
	b.Flag(&k.Describe, "describe", "With --real: write the cluster's addresses (and certificates) as JSON to this file once every broker serves.")
}

func (c *kafkaCmd) Check() error {
	var p config.Problems
	p.Nested("broker", c.broker.Validate())
	return p.Err()
}

func (c *kafkaCmd) Run(ctx context.Context, e *cli.Env) error {
	b, err := broker.New(c.broker, broker.Deps{Log: e.Log})
	if err != nil {
		return err
	}
	return b.Run(ctx)
}
