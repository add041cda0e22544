package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"tidemark/capture"
	"tidemark/internal/telemetry"
)

// captureCmd wires flags into capture.Config and runs the stage with the
// metrics endpoint.
type captureCmd struct {
	pgFlag
	statusPageFlag
	Kafka           string        `name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated (host:port,...)."`
	Topic           string        `name:"topic" env:"TIDEMARK_TOPIC" default:"tidemark.invalidations" help:"Kafka topic of invalidation events."`
	Partitions      int           `name:"partitions" env:"TIDEMARK_PARTITIONS" default:"12" help:"Partitions of the topic when capture creates it."`
	Slot            string        `name:"slot" env:"TIDEMARK_SLOT" default:"tidemark" help:"Logical replication slot."`
	Publication     string        `name:"publication" env:"TIDEMARK_PUBLICATION" default:"tidemark" help:"Publication to stream."`
	CreateSlot      bool          `name:"create-slot" env:"TIDEMARK_CREATE_SLOT" default:"true" negatable:"" help:"Create the slot when missing."`
	Table           string        `name:"table" env:"TIDEMARK_TABLE" default:"catalog.items" help:"Captured table (schema.table)."`
	TenantColumn    string        `name:"tenant-column" env:"TIDEMARK_TENANT_COLUMN" default:"tenant_id" help:"Tenant column of the captured table."`
	ItemColumn      string        `name:"item-column" env:"TIDEMARK_ITEM_COLUMN" default:"item_id" help:"Item column of the captured table."`
	VersionColumn   string        `name:"version-column" env:"TIDEMARK_VERSION_COLUMN" default:"version" help:"Version column (bigint) of the captured table."`
	StateColumn     string        `name:"state-column" env:"TIDEMARK_STATE_COLUMN" default:"state" help:"State column; an update setting it to --deleted-state is a delete (empty: no tombstones)."`
	DeletedState    string        `name:"deleted-state" env:"TIDEMARK_DELETED_STATE" default:"deleted" help:"State value of a tombstone."`
	Heartbeat       time.Duration `name:"heartbeat" env:"TIDEMARK_HEARTBEAT" default:"1s" help:"Heartbeat interval (resolved markers follow it)."`
	HeartbeatMargin time.Duration `name:"heartbeat-margin" env:"TIDEMARK_HEARTBEAT_MARGIN" default:"500ms" help:"Resolved marker time = heartbeat time - margin."`
	HeartbeatMode   string        `name:"heartbeat-mode" env:"TIDEMARK_HEARTBEAT_MODE" default:"auto" help:"auto, message (pg_logical_emit_message) or row (update --heartbeat-table)."`
	HeartbeatTable  string        `name:"heartbeat-table" env:"TIDEMARK_HEARTBEAT_TABLE" default:"catalog.tidemark_heartbeat" help:"Heartbeat table for row mode."`
	MaxInflight     int           `name:"max-inflight" env:"TIDEMARK_MAX_INFLIGHT" default:"20000" help:"Records in flight to Kafka before WAL reading pauses."`
	SlotPoll        time.Duration `name:"slot-poll" env:"TIDEMARK_SLOT_POLL" default:"5s" help:"How often slot health is polled."`
	ShutdownTimeout time.Duration `name:"shutdown-timeout" env:"TIDEMARK_SHUTDOWN_TIMEOUT" default:"30s" help:"Bound on the final flush to Kafka at shutdown."`
	MaxProcs        int           `name:"max-procs" env:"TIDEMARK_CAPTURE_MAX_PROCS" default:"1" help:"GOMAXPROCS for this process (0 = one per core). One WAL stream is sequential work: on a box it shares with Postgres, a second P mostly adds scheduler spinning that takes CPU from the walsender (BENCHMARKS.md, Capture benchmark)."`
	MetricsAddr     string        `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9101" help:"Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off)."`
	Redis           string        `name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier whose freshness watermark the status page reads (optional; without it the page cannot judge freshness)."`
	Group           string        `name:"group" env:"TIDEMARK_GROUP" default:"tidemark-applier" help:"The applier's consumer group, for the status page's lag table."`
	Namespace       string        `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"catalog" help:"Cache-tier key namespace, for the status page."`
}

func (c *captureCmd) config() capture.Config {
	cfg := capture.DefaultConfig()
	cfg.PG = c.PG
	cfg.Relay.Brokers = splitList(c.Kafka)
	cfg.Relay.Topic, cfg.Relay.Partitions, cfg.Relay.MaxInflight = c.Topic, c.Partitions, c.MaxInflight
	cfg.Slot, cfg.Publication, cfg.CreateSlot = c.Slot, c.Publication, c.CreateSlot
	cfg.Table, cfg.TenantColumn, cfg.ItemColumn, cfg.VersionColumn = c.Table, c.TenantColumn, c.ItemColumn, c.VersionColumn
	cfg.StateColumn, cfg.DeletedState = c.StateColumn, c.DeletedState
	cfg.Heartbeat, cfg.HeartbeatMargin, cfg.HeartbeatMode, cfg.HeartbeatTable = c.Heartbeat, c.HeartbeatMargin, c.HeartbeatMode, c.HeartbeatTable
	cfg.SlotPoll, cfg.ShutdownTimeout = c.SlotPoll, c.ShutdownTimeout
	return cfg
}

func (c *captureCmd) Validate() error {
	err := c.config().Validate()
	if c.MaxProcs < 0 {
		err = errors.Join(err, fmt.Errorf("--max-procs %d must not be negative", c.MaxProcs))
	}
	return err
}

func (c *captureCmd) Run(ctx context.Context, e *env) error {
	if c.MaxProcs > 0 {
		runtime.GOMAXPROCS(c.MaxProcs)
	}
	reg := telemetry.NewRegistry()
	capt, err := capture.New(c.config(), capture.Deps{Log: e.log, Registerer: reg})
	if err != nil {
		return err
	}
	page, err := c.page(e, "capture", statusTarget{c.Kafka, c.Redis, c.PG, c.Topic, c.Group, c.Namespace, c.Slot}, reg)
	if err != nil {
		return err
	}
	return runStage(ctx, e, c.MetricsAddr, reg, page, capt)
}
