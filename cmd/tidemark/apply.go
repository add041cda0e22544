package main

import (
	"context"
	"errors"
	"time"

	"tidemark/applier"
	"tidemark/cache"
	"tidemark/internal/telemetry"
)

// applyCmd wires flags into applier.Config and runs the group applier with
// the metrics endpoint.
type applyCmd struct {
	statusPageFlag
	Kafka          string        `name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated (host:port,...)."`
	Redis          string        `name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier: redis://host:port/db, or a comma-separated seed list for Redis Cluster."`
	Topic          string        `name:"topic" env:"TIDEMARK_TOPIC" default:"tidemark.invalidations" help:"Kafka topic of invalidation events (bad records go to <topic>.dlq)."`
	Group          string        `name:"group" env:"TIDEMARK_GROUP" default:"tidemark-applier" help:"Kafka consumer group."`
	Namespace      string        `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"catalog" help:"Cache-tier key namespace."`
	SessionTimeout time.Duration `name:"session-timeout" env:"TIDEMARK_SESSION_TIMEOUT" default:"6s" help:"Group session timeout: how fast a dead applier's partitions move."`
	MaxBatch       int           `name:"max-batch" env:"TIDEMARK_MAX_BATCH" default:"500" help:"Invalidations per batched cache-tier call."`
	Linger         time.Duration `name:"linger" env:"TIDEMARK_LINGER" default:"0s" help:"How long a partition worker waits to fill a batch (0: apply what has arrived; records arriving meanwhile form the next batch)."`
	CommitInterval time.Duration `name:"commit-interval" env:"TIDEMARK_COMMIT_INTERVAL" default:"1s" help:"How often applied offsets are committed."`
	HardLifetime   time.Duration `name:"cache-hard-lifetime" env:"TIDEMARK_CACHE_HARD_LIFETIME" default:"29.8s" help:"Cache hard lifetime: the span re-applied after a cache-tier failover (plus lag)."`
	MetricsAddr    string        `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9102" help:"Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off)."`
	AllowEviction  bool          `name:"allow-allkeys-eviction" env:"TIDEMARK_ALLOW_ALLKEYS_EVICTION" help:"Start even if Redis's maxmemory-policy is allkeys-*, which may evict the watermark hash (use volatile-lru instead)."`
	PG             string        `name:"pg" env:"TIDEMARK_PG" help:"Postgres DSN (optional): adds replication slot health to the status page."`
	Slot           string        `name:"slot" env:"TIDEMARK_SLOT" default:"tidemark" help:"Replication slot shown on the status page (with --pg)."`
}

func (c *applyCmd) config() applier.Config {
	cfg := applier.DefaultConfig()
	cfg.Brokers = splitList(c.Kafka)
	cfg.Topic, cfg.Group, cfg.SessionTimeout = c.Topic, c.Group, c.SessionTimeout
	cfg.MaxBatch, cfg.Linger, cfg.CommitInterval, cfg.HardLifetime = c.MaxBatch, c.Linger, c.CommitInterval, c.HardLifetime
	return cfg
}

func (c *applyCmd) cacheConfig() cache.Config {
	cfg := cache.DefaultConfig()
	cfg.Namespace, cfg.HardLifetime = c.Namespace, c.HardLifetime
	cfg.AllowAllKeysEviction = c.AllowEviction
	return cfg
}

func (c *applyCmd) Validate() error {
	var errs []error
	if c.Redis == "" {
		errs = append(errs, errors.New("--redis is required (redis://host:port/db or a Cluster seed list)"))
	}
	return errors.Join(append(errs, c.config().Validate(), c.cacheConfig().Validate())...)
}

func (c *applyCmd) Run(ctx context.Context, e *env) error {
	rdb, err := cache.ParseRedisURL(c.Redis)
	if err != nil {
		return usageError(err)
	}
	defer rdb.Close()
	reg := telemetry.NewRegistry()
	cc, err := cache.New(c.cacheConfig(), rdb, e.log, reg)
	if err != nil {
		return err
	}
	app, err := applier.New(c.config(), applier.Deps{Cache: cc, Log: e.log, Registerer: reg})
	if err != nil {
		return err
	}
	clock, err := newClockGuard(rdb, nil, e.log, reg)
	if err != nil {
		return err
	}
	page, err := c.page(e, "apply", statusTarget{c.Kafka, c.Redis, c.PG, c.Topic, c.Group, c.Namespace, c.Slot}, reg)
	if err != nil {
		return err
	}
	return runStage(ctx, e, c.MetricsAddr, reg, page, guardedStage{app, clock})
}
