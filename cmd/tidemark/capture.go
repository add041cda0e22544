package main

import (
	"context"
	"runtime"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/relay"
)

// captureCmd wires flags into capture.Config and runs the stage with the
// metrics endpoint.
type captureCmd struct {
	pgFlag
	statusPageFlag
	processFlags
	cli.KafkaFlags
	cli.RedisFlags
	cli.TableFlags
	Kafka           string        `field:"capture.Relay.Brokers,page.Check.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated (host:port,...)."`
	Topic           string        `field:"capture.Relay.Topic,page.Check.Topic" name:"topic" env:"TIDEMARK_TOPIC" default:"${capture_Relay_Topic}" help:"Kafka topic of invalidation events."`
	Partitions      int           `field:"capture.Relay.Partitions" name:"partitions" env:"TIDEMARK_PARTITIONS" default:"${capture_Relay_Partitions}" help:"Partitions of the topic when capture creates it."`
	Slot            string        `field:"capture.Slot,page.Check.Slot" name:"slot" env:"TIDEMARK_SLOT" default:"${capture_Slot}" help:"Logical replication slot."`
	Publication     string        `field:"capture.Publication" name:"publication" env:"TIDEMARK_PUBLICATION" default:"${capture_Publication}" help:"Publication to stream."`
	CreateSlot      bool          `field:"capture.CreateSlot" name:"create-slot" env:"TIDEMARK_CREATE_SLOT" default:"${capture_CreateSlot}" negatable:"" help:"Create the slot when missing."`
	Heartbeat       time.Duration `field:"capture.Heartbeat" name:"heartbeat" env:"TIDEMARK_HEARTBEAT" default:"${capture_Heartbeat}" help:"Heartbeat interval (resolved markers follow it)."`
	HeartbeatMargin time.Duration `field:"capture.HeartbeatMargin" name:"heartbeat-margin" env:"TIDEMARK_HEARTBEAT_MARGIN" default:"${capture_HeartbeatMargin}" help:"Resolved marker time = heartbeat time - margin."`
	HeartbeatMode   string        `field:"capture.HeartbeatMode" name:"heartbeat-mode" env:"TIDEMARK_HEARTBEAT_MODE" default:"${capture_HeartbeatMode}" help:"auto, message (pg_logical_emit_message) or row (update --heartbeat-table)."`
	HeartbeatTable  string        `field:"capture.HeartbeatTable" name:"heartbeat-table" env:"TIDEMARK_HEARTBEAT_TABLE" default:"${capture_HeartbeatTable}" help:"Heartbeat table for row mode."`
	MaxInflight     int           `field:"capture.Relay.MaxInflight" name:"max-inflight" env:"TIDEMARK_MAX_INFLIGHT" default:"${capture_Relay_MaxInflight}" help:"Records in flight to Kafka before WAL reading pauses."`
	SlotPoll        time.Duration `field:"capture.SlotPoll" name:"slot-poll" env:"TIDEMARK_SLOT_POLL" default:"${capture_SlotPoll}" help:"How often slot health is polled."`
	ShutdownTimeout time.Duration `field:"capture.ShutdownTimeout" name:"shutdown-timeout" env:"TIDEMARK_SHUTDOWN_TIMEOUT" default:"${capture_ShutdownTimeout}" help:"Bound on the final flush to Kafka at shutdown."`
	StatusInterval  time.Duration `field:"capture.StatusInterval" name:"status-interval" env:"TIDEMARK_STATUS_INTERVAL" default:"${capture_StatusInterval}" help:"Standby status to Postgres at least this often (at most 10s)."`
	RetryMin        time.Duration `field:"capture.RetryMin" name:"retry-min" env:"TIDEMARK_RETRY_MIN" default:"${capture_RetryMin}" help:"First retry delay while the slot is active elsewhere or Postgres is down."`
	RetryMax        time.Duration `field:"capture.RetryMax" name:"retry-max" env:"TIDEMARK_RETRY_MAX" default:"${capture_RetryMax}" help:"Longest retry delay."`
	Linger          time.Duration `field:"capture.Relay.Linger" name:"linger" env:"TIDEMARK_LINGER" default:"${capture_Relay_Linger}" help:"How long the producer waits to fill a batch."`
	TopicRefresh    time.Duration `field:"capture.Relay.TopicRefresh" name:"topic-refresh" env:"TIDEMARK_TOPIC_REFRESH" default:"${capture_Relay_TopicRefresh}" help:"How old the producer's view of the topic may get: partitions added to the topic are routed to and marked within about this."`
	TopicReplicas   int           `field:"capture.Relay.Require.ReplicationFactor" name:"topic-replication-factor" env:"TIDEMARK_TOPIC_REPLICATION_FACTOR" default:"${require_ReplicationFactor}" help:"Replication factor the data topic must have (a smaller cluster is held to its broker count)."`
	TopicMinInsync  int           `field:"capture.Relay.Require.MinInsync" name:"topic-min-insync" env:"TIDEMARK_TOPIC_MIN_INSYNC" default:"${require_MinInsync}" help:"min.insync.replicas the data topic must have."`
	TopicRetention  time.Duration `field:"capture.Relay.Require.Retention" name:"topic-min-retention" env:"TIDEMARK_TOPIC_MIN_RETENTION" default:"${require_Retention}" help:"Shortest retention.ms the data topic may have when it deletes old segments."`
	MaxProcs        int           `field:"MaxProcs" name:"max-procs" env:"TIDEMARK_CAPTURE_MAX_PROCS" default:"1" help:"GOMAXPROCS for this process (0 = one per core). One WAL stream is sequential work: on a box it shares with Postgres, a second P mostly adds scheduler spinning that takes CPU from the walsender (BENCHMARKS.md, Capture benchmark)."`
	MetricsAddr     string        `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9101" help:"Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off)."`
	Redis           string        `field:"page.Check.Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier whose freshness watermark the status page reads (optional; without it the page cannot judge freshness)."`
	Group           string        `field:"page.Check.Group" name:"group" env:"TIDEMARK_GROUP" default:"${page_Check_Group}" help:"The applier's consumer group, for the status page's lag table."`
	Namespace       string        `field:"page.Check.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${page_Check_Namespace}" help:"Cache-tier key namespace, for the status page."`
}

func (c *captureCmd) config() capture.Config {
	cfg := capture.DefaultConfig()
	cfg.PG = c.PG
	cfg.Relay.Brokers, cfg.Relay.Kafka = cli.SplitList(c.Kafka), c.KafkaConn()
	cfg.Relay.Topic, cfg.Relay.Partitions, cfg.Relay.MaxInflight = c.Topic, c.Partitions, c.MaxInflight
	cfg.Slot, cfg.Publication, cfg.CreateSlot = c.Slot, c.Publication, c.CreateSlot
	t := c.CatalogTable()
	cfg.Table, cfg.TenantColumn, cfg.ItemColumn, cfg.VersionColumn = t.Name, t.TenantColumn, t.ItemColumn, t.VersionColumn
	cfg.StateColumn, cfg.DeletedState = t.StateColumn, t.DeletedState
	cfg.Heartbeat, cfg.HeartbeatMargin, cfg.HeartbeatMode, cfg.HeartbeatTable = c.Heartbeat, c.HeartbeatMargin, c.HeartbeatMode, c.HeartbeatTable
	cfg.SlotPoll, cfg.ShutdownTimeout = c.SlotPoll, c.ShutdownTimeout
	cfg.StatusInterval, cfg.RetryMin, cfg.RetryMax, cfg.Relay.Linger = c.StatusInterval, c.RetryMin, c.RetryMax, c.Linger
	cfg.Relay.TopicRefresh = c.TopicRefresh
	cfg.Relay.Require = relay.TopicRequirements{ReplicationFactor: c.TopicReplicas, MinInsync: c.TopicMinInsync, Retention: c.TopicRetention}
	return cfg
}

func (c *captureCmd) Validate() error {
	var p config.Problems
	c.processFlags.validate(&p)
	cli.ValidateAs(&p, "table", c.CatalogTable().Validate())
	cli.ValidateAs(&p, "capture", c.config().Validate())
	c.ValidateRedis(&p, c.Redis)
	if c.MaxProcs < 0 {
		p.Add("MaxProcs", "must not be negative (got %d)", c.MaxProcs)
	}
	cli.ValidateAs(&p, "page", c.pageConfig(c.target()).Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *captureCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.MaxProcs > 0 {
		runtime.GOMAXPROCS(c.MaxProcs)
	}
	pl := telemetry.Pipeline{Namespace: c.Namespace, Topic: c.Topic}
	reg := telemetry.NewRegistry(pl)
	var g lifecycle.Group
	tp, err := c.tracing(e, &g, "capture", pl)
	if err != nil {
		return err
	}
	ccfg := c.config()
	ccfg.PGFile = e.File("pg")
	capt, err := wiring.AddCapture(&g, ccfg, e.Log, reg, tp)
	if err != nil {
		return err
	}
	page, err := c.page(e, "capture", c.target(), reg, ready(capt.Ready))
	if err != nil {
		return err
	}
	return runProcess(ctx, e, c.processFlags, c.MetricsAddr, reg, page, &g, probes{ready: ready(capt.Ready), live: ready(capt.Live)})
}

func (c *captureCmd) target() statusTarget {
	return statusTarget{c.Kafka, c.Redis, c.PG, c.Topic, c.Group, c.Namespace, c.Slot, c.KafkaConn(), c.RedisConn(c.Redis), ""}
}
