package main

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
)

// applyCmd wires flags into applier.Config and runs the group applier with
// the metrics endpoint.
type applyCmd struct {
	statusPageFlag
	processFlags
	cli.KafkaFlags
	cli.RedisFlags
	Kafka            string        `field:"applier.Brokers,page.Check.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated (host:port,...)."`
	Redis            string        `field:"Redis,page.Check.Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier: redis://host:port/db, or a comma-separated seed list for Redis Cluster."`
	Topic            string        `field:"applier.Topic,page.Check.Topic" name:"topic" env:"TIDEMARK_TOPIC" default:"${applier_Topic}" help:"Kafka topic of invalidation events (bad records go to <topic>.dlq)."`
	Group            string        `field:"applier.Group,page.Check.Group" name:"group" env:"TIDEMARK_GROUP" default:"${applier_Group}" help:"Kafka consumer group."`
	Namespace        string        `field:"cache.Namespace,page.Check.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${cache_Namespace}" help:"Cache-tier key namespace."`
	SessionTimeout   time.Duration `field:"applier.SessionTimeout" name:"session-timeout" env:"TIDEMARK_SESSION_TIMEOUT" default:"${applier_SessionTimeout}" help:"Group session timeout: how fast a dead applier's partitions move."`
	MaxBatch         int           `field:"applier.MaxBatch" name:"max-batch" env:"TIDEMARK_MAX_BATCH" default:"${applier_MaxBatch}" help:"Invalidations per batched cache-tier call."`
	Linger           time.Duration `field:"applier.Linger" name:"linger" env:"TIDEMARK_LINGER" default:"${applier_Linger}" help:"How long a partition worker waits to fill a batch (0: apply what has arrived; records arriving meanwhile form the next batch)."`
	CommitInterval   time.Duration `field:"applier.CommitInterval" name:"commit-interval" env:"TIDEMARK_COMMIT_INTERVAL" default:"${applier_CommitInterval}" help:"How often applied offsets are committed."`
	MaxQueue         int           `field:"applier.MaxQueue" name:"max-queue" env:"TIDEMARK_MAX_QUEUE" default:"${applier_MaxQueue}" help:"Records a partition worker may hold before fetching pauses (at least --max-batch)."`
	IdentityInterval time.Duration `field:"applier.IdentityInterval" name:"identity-interval" env:"TIDEMARK_IDENTITY_INTERVAL" default:"${applier_IdentityInterval}" help:"How often the cache tier's identity (run_id, replication id, topology) is checked for a restart or failover."`
	MetricsInterval  time.Duration `field:"applier.MetricsInterval" name:"metrics-interval" env:"TIDEMARK_METRICS_INTERVAL" default:"${applier_MetricsInterval}" help:"How often consumer lag and watermark ages are refreshed."`
	TopicInterval    time.Duration `field:"applier.TopicInterval" name:"topic-interval" env:"TIDEMARK_TOPIC_INTERVAL" default:"${applier_TopicInterval}" help:"How often the topic's partition count is re-read."`
	BackoffMin       time.Duration `field:"applier.BackoffMin" name:"backoff-min" env:"TIDEMARK_BACKOFF_MIN" default:"${applier_BackoffMin}" help:"First retry delay after a cache-tier or Kafka error."`
	BackoffMax       time.Duration `field:"applier.BackoffMax" name:"backoff-max" env:"TIDEMARK_BACKOFF_MAX" default:"${applier_BackoffMax}" help:"Longest retry delay."`
	cli.CacheFlags
	MetricsAddr   string `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9102" help:"Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off)."`
	AllowEviction bool   `field:"cache.AllowAllKeysEviction" name:"allow-allkeys-eviction" env:"TIDEMARK_ALLOW_ALLKEYS_EVICTION" help:"Start even if Redis's maxmemory-policy is allkeys-*, which may evict the watermark hash (use volatile-lru instead)."`
	PG            string `field:"page.Check.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres DSN (optional): adds replication slot health to the status page."`
	Slot          string `field:"page.Check.Slot" name:"slot" env:"TIDEMARK_SLOT" default:"${page_Check_Slot}" help:"Replication slot shown on the status page (with --pg)."`
}

func (c *applyCmd) config() applier.Config {
	cfg := applier.DefaultConfig()
	cfg.Brokers, cfg.Kafka = cli.SplitList(c.Kafka), c.KafkaConn()
	cfg.Topic, cfg.Group, cfg.SessionTimeout = c.Topic, c.Group, c.SessionTimeout
	cfg.MaxBatch, cfg.Linger, cfg.CommitInterval, cfg.HardLifetime = c.MaxBatch, c.Linger, c.CommitInterval, c.CacheHardLifetime
	cfg.MaxQueue, cfg.IdentityInterval, cfg.MetricsInterval, cfg.TopicInterval = c.MaxQueue, c.IdentityInterval, c.MetricsInterval, c.TopicInterval
	cfg.BackoffMin, cfg.BackoffMax = c.BackoffMin, c.BackoffMax
	return cfg
}

func (c *applyCmd) cacheConfig() cache.Config {
	cfg := c.CacheTier(c.Namespace)
	cfg.AllowAllKeysEviction = c.AllowEviction
	return cfg
}

func (c *applyCmd) Validate() error {
	var p config.Problems
	c.processFlags.validate(&p)
	if c.Redis == "" {
		p.Add("Redis", "is required (redis://host:port/db or a Cluster seed list)")
	}
	c.ValidateRedis(&p, c.Redis)
	cli.ValidateAs(&p, "applier", c.config().Validate())
	cli.ValidateAs(&p, "cache", c.cacheConfig().Validate())
	cli.ValidateAs(&p, "page", c.pageConfig(c.target()).Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *applyCmd) Run(ctx context.Context, e *cli.Env) error {
	pl := telemetry.Pipeline{Namespace: c.Namespace, Topic: c.Topic}
	reg := telemetry.NewRegistry(pl)
	rc := c.RedisConn(c.Redis)
	rc.URLFile = e.File("redis")
	tier, err := wiring.OpenTier(rc, c.cacheConfig(), nil, e.Log, reg)
	if err != nil {
		return cli.UsageError(err)
	}
	defer tier.Close()
	var g lifecycle.Group
	tp, err := c.tracing(e, &g, "apply", pl)
	if err != nil {
		return err
	}
	app, err := wiring.AddApply(&g, c.config(), tier, e.Log, reg, tp)
	if err != nil {
		return err
	}
	g.Add(lifecycle.Cache, "clock guard", tier.Clock.Run)
	page, err := c.page(e, "apply", c.target(), reg, ready(tier.Clock.Ready, app.Ready))
	if err != nil {
		return err
	}
	return runProcess(ctx, e, c.processFlags, c.MetricsAddr, reg, page, &g, probes{ready: ready(tier.Clock.Ready, app.Ready), live: ready(app.Live)})
}

func (c *applyCmd) target() statusTarget {
	return statusTarget{c.Kafka, c.Redis, c.PG, c.Topic, c.Group, c.Namespace, c.Slot, c.KafkaConn(), c.RedisConn(c.Redis), ""}
}
