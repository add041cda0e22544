package main

import (
	"context"
	"runtime"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/relay"
)

// captureCmd binds its flags into capture.Config and runs the stage with
// the metrics endpoint.
type captureCmd struct {
	statusPageFlag
	processFlags
	capture     capture.Config
	table       catalog.Table
	redis       cache.RedisConfig
	maxProcs    int
	metricsAddr string
}

func (c *captureCmd) Bind(b *cli.Binder) {
	c.capture, c.table, c.redis = capture.DefaultConfig(), catalog.DefaultTable(), cache.DefaultRedisConfig()
	c.capture.Relay.Require = relay.DefaultTopicRequirements() // what capture holds the topic to when left zero
	c.maxProcs, c.metricsAddr = 1, "127.0.0.1:9101"
	cfg, r := &c.capture, &c.capture.Relay
	b.Flag(&cfg.PG, "pg", "Postgres connection string (postgres://user@host:port/db).")
	c.bindPage(b)
	c.bindProcess(b)
	cli.KafkaFlags(b, &r.Kafka)
	cli.RedisFlags(b, &c.redis, "Cache tier whose freshness watermark the status page reads (optional; without it the page cannot judge freshness).")
	cli.TableFlags(b, &c.table)
	b.Flag(&r.Brokers, "kafka", "Kafka bootstrap brokers, comma-separated (host:port,...).")
	b.Flag(&r.Topic, "topic", "Kafka topic of invalidation events.")
	b.Flag(&r.Partitions, "partitions", "Partitions of the topic when capture creates it.")
	b.Flag(&cfg.Slot, "slot", "Logical replication slot.")
	b.Flag(&cfg.Publication, "publication", "Publication to stream.")
	b.Flag(&cfg.CreateSlot, "create-slot", "Create the slot when missing.").Negatable()
	b.Flag(&cfg.Heartbeat, "heartbeat", "Heartbeat interval, at most 3s (resolved markers follow it; an idle catalog's watermark ages by it).")
	b.Flag(&cfg.HeartbeatMargin, "heartbeat-margin", "Resolved marker time = heartbeat time - margin.")
	b.Flag(&cfg.HeartbeatMode, "heartbeat-mode", "auto, message (pg_logical_emit_message) or row (update --heartbeat-table).")
	b.Flag(&cfg.HeartbeatTable, "heartbeat-table", "Heartbeat table for row mode.")
	b.Flag(&r.MaxInflight, "max-inflight", "Records in flight to Kafka before WAL reading pauses.")
	b.Flag(&cfg.SlotPoll, "slot-poll", "How often slot health is polled.")
	b.Flag(&cfg.ShutdownTimeout, "shutdown-timeout", "Bound on the final flush to Kafka at shutdown.")
	b.Flag(&cfg.StatusInterval, "status-interval", "Standby status to Postgres at least this often (at most 10s).")
	b.Flag(&cfg.RetryMin, "retry-min", "First retry delay while the slot is active elsewhere or Postgres is down.")
	b.Flag(&cfg.RetryMax, "retry-max", "Longest retry delay.")
	b.Flag(&r.Linger, "linger", "How long the producer waits to fill a batch. Shorter lowers commit-to-applied latency at a low change rate and sends the broker more, smaller requests: on a box shared with the broker, 300µs took up to a millisecond off the median on a light broker and lengthened every percentile on Apache Kafka (BENCHMARKS.md, producer linger).").Env("TIDEMARK_CAPTURE_LINGER").Replaces("TIDEMARK_LINGER")
	b.Flag(&r.TopicRefresh, "topic-refresh", "How old the producer's view of the topic may get: partitions added to the topic are routed to and marked within about this.")
	b.Flag(&r.Require.ReplicationFactor, "topic-replication-factor", "Replication factor the data topic must have (a smaller cluster is held to its broker count).")
	b.Flag(&r.Require.MinInsync, "topic-min-insync", "min.insync.replicas the data topic must have.")
	b.Flag(&r.Require.Retention, "topic-min-retention", "Shortest retention.ms the data topic may have when it deletes old segments (and min.compaction.lag.ms when it compacts); at least 1m.")
	b.Flag(&c.maxProcs, "max-procs", "GOMAXPROCS for this process (0 = one per core). One WAL stream is sequential work: on a box it shares with Postgres, a second P mostly adds scheduler spinning that takes CPU from the walsender (BENCHMARKS.md, Capture benchmark).").Env("TIDEMARK_CAPTURE_MAX_PROCS")
	b.Flag(&c.metricsAddr, "metrics-addr", "Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off).")
	b.Flag(&c.page.Check.Group, "group", "The applier's consumer group, for the status page's lag table.")
	b.Flag(&c.page.Check.Namespace, "namespace", "Cache-tier key namespace, for the status page.")
	// capture names the table's columns itself; the status page reads what
	// capture writes to.
	t := &c.table
	for _, d := range [][2]*string{{&cfg.Table, &t.Name}, {&cfg.TenantColumn, &t.TenantColumn}, {&cfg.ItemColumn, &t.ItemColumn},
		{&cfg.VersionColumn, &t.VersionColumn}, {&cfg.StateColumn, &t.StateColumn}, {&cfg.DeletedState, &t.DeletedState}} {
		b.Derive(d[0], d[1])
	}
	b.Derive(&c.page.Check.Brokers, &r.Brokers)
	b.Derive(&c.page.Check.Kafka, &r.Kafka)
	b.Derive(&c.page.Check.Topic, &r.Topic)
	b.Derive(&c.page.Check.Slot, &cfg.Slot)
	b.Derive(&c.page.Check.PG, &cfg.PG)
	b.Derive(&c.page.Check.Redis, &c.redis.URL)
	b.Derive(&c.page.Check.RedisConn, &c.redis)
}

func (c *captureCmd) Check() error {
	var p config.Problems
	c.checkProcess(&p)
	p.Nested("table", c.table.Validate())
	p.Nested("capture", c.capture.Validate())
	cli.CheckRedis(&p, c.redis)
	if c.maxProcs < 0 {
		p.Add("maxProcs", "must not be negative (got %d)", c.maxProcs)
	}
	p.Nested("page", c.page.Validate())
	return p.Err()
}

func (c *captureCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.maxProcs > 0 {
		runtime.GOMAXPROCS(c.maxProcs)
	}
	pl := telemetry.Pipeline{Namespace: c.page.Check.Namespace, Topic: c.capture.Relay.Topic}
	reg := telemetry.NewRegistry(pl)
	var g lifecycle.Group
	tp, err := c.tracing(e, &g, "capture", pl)
	if err != nil {
		return err
	}
	ccfg := c.capture
	ccfg.PGFile = e.File("pg")
	capt, err := wiring.AddCapture(&g, ccfg, e.Log, reg, tp)
	if err != nil {
		return err
	}
	page, err := c.statusPage(e, "capture", reg, ready(capt.Ready))
	if err != nil {
		return err
	}
	return runProcess(ctx, e, c.processFlags, c.metricsAddr, reg, page, &g, probes{ready: ready(capt.Ready), live: ready(capt.Live)})
}
