package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/broker"
)

type kafkaCmd struct {
	DataDir    string `field:"broker.DataDir" name:"data-dir" env:"TIDEMARK_KAFKA_DATA_DIR" default:"${broker_DataDir}" help:"Persist topics and offsets here (page cache, fsync on segment roll and shutdown: survives kill -9, not a machine crash); empty keeps them in memory."`
	SyncWrites bool   `field:"broker.SyncWrites" name:"sync-writes" env:"TIDEMARK_KAFKA_SYNC_WRITES" help:"Fsync every produced batch before acknowledging it (survives a machine crash; every produce waits for the disk). Embedded broker only."`
	Port       int    `field:"broker.Port" name:"port" env:"TIDEMARK_KAFKA_PORT" default:"${broker_Port}" help:"Port of the first broker; broker i listens on port+i."`
	Brokers    int    `field:"broker.Brokers" name:"brokers" env:"TIDEMARK_KAFKA_BROKERS" default:"${broker_Brokers}" help:"Number of brokers."`
	Partitions int    `field:"broker.Partitions" name:"partitions" env:"TIDEMARK_KAFKA_PARTITIONS" default:"${broker_Partitions}" help:"Partitions of auto-created topics."`
	Real       bool   `field:"broker.Real" name:"real" env:"TIDEMARK_KAFKA_REAL" help:"Run Apache Kafka itself (KRaft; a JVM per broker, Java 17+; fetched with Maven on first use) instead of kfake; broker i listens on port+i, its controller on port+brokers+i."`
}

func (c *kafkaCmd) config() broker.Config {
	return broker.Config{DataDir: c.DataDir, SyncWrites: c.SyncWrites, Port: c.Port, Brokers: c.Brokers, Partitions: c.Partitions, Real: c.Real}
}

func (c *kafkaCmd) Validate() error {
	var p config.Problems
	cli.ValidateAs(&p, "broker", c.config().Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *kafkaCmd) Run(ctx context.Context, e *cli.Env) error {
	b, err := broker.New(c.config(), broker.Deps{Log: e.Log})
	if err != nil {
		return err
	}
	return b.Run(ctx)
}
