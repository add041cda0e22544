package main

import (
	"context"
	"runtime"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
)

// applyCmd binds its flags into applier.Config and cache.Config and runs
// the group applier with the metrics endpoint.
type applyCmd struct {
	statusPageFlag
	processFlags
	applier     applier.Config
	cache       cache.Config
	redis       cache.RedisConfig
	maxProcs    int
	metricsAddr string
}

func (c *applyCmd) Bind(b *cli.Binder) {
	c.applier, c.cache, c.redis, c.maxProcs, c.metricsAddr = applier.DefaultConfig(), cache.DefaultConfig(), cache.DefaultRedisConfig(), 1, "127.0.0.1:9102"
	c.bindPage(b)
	c.bindProcess(b)
	cli.KafkaFlags(b, &c.applier.Kafka)
	cli.RedisFlags(b, &c.redis, "Cache tier: redis://host:port/db, or a comma-separated seed list for Redis Cluster.")
	a := &c.applier
	b.Flag(&a.Brokers, "kafka", "Kafka bootstrap brokers, comma-separated (host:port,...).")
	b.Flag(&a.Topic, "topic", "Kafka topic of invalidation events (bad records go to <topic>.dlq).")
	b.Flag(&a.Group, "group", "Kafka consumer group.")
	b.Flag(&c.cache.Namespace, "namespace", "Cache-tier key namespace.")
	b.Flag(&a.SessionTimeout, "session-timeout", "Group session timeout: how fast a dead applier's partitions move.")
	b.Flag(&a.MaxBatch, "max-batch", "Invalidations per batched cache-tier call.")
	b.Flag(&a.Linger, "linger", "How long a partition worker waits to fill a batch (0: apply what has arrived; records arriving meanwhile form the next batch).").Env("TIDEMARK_APPLY_LINGER").Replaces("TIDEMARK_LINGER")
	b.Flag(&a.CommitInterval, "commit-interval", "How often applied offsets are committed.")
	b.Flag(&a.MaxQueue, "max-queue", "Records a partition worker may hold before fetching pauses (at least --max-batch).")
	b.Flag(&a.IdentityInterval, "identity-interval", "How often the cache tier's identity (run_id, replication id, topology) is checked for a restart or failover (at most 1s).")
	b.Flag(&a.MetricsInterval, "metrics-interval", "How often consumer lag and watermark ages are refreshed.")
	b.Flag(&a.TopicInterval, "topic-interval", "How often the topic's partition count is re-read.")
	b.Flag(&a.BackoffMin, "backoff-min", "First retry delay after a cache-tier or Kafka error.")
	b.Flag(&a.BackoffMax, "backoff-max", "Longest retry delay.")
	cli.CacheFlags(b, &c.cache)
	b.Flag(&c.maxProcs, "max-procs", "GOMAXPROCS for this process (0 = one per core). Applying mostly waits on Kafka and Redis: on a box shared with them, one P took 10 % less CPU per change than two and held commit-to-applied p99 at 20,000 changes/s where two did not (BENCHMARKS.md, apply's GOMAXPROCS). Scale out with more apply processes; raise it for one process with a large backlog on a dedicated host.").Env("TIDEMARK_APPLY_MAX_PROCS")
	b.Flag(&c.metricsAddr, "metrics-addr", "Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off).")
	cli.EvictionFlag(b, &c.cache)
	b.Flag(&c.page.Check.PG, "pg", "Postgres DSN (optional): adds replication slot health to the status page.")
	b.Flag(&c.page.Check.Slot, "slot", "Replication slot shown on the status page (with --pg).")
	// What the status page knows of the pipeline is what the applier uses.
	b.Derive(&c.page.Check.Brokers, &a.Brokers)
	b.Derive(&c.page.Check.Kafka, &a.Kafka)
	b.Derive(&c.page.Check.Topic, &a.Topic)
	b.Derive(&c.page.Check.Group, &a.Group)
	b.Derive(&c.page.Check.Namespace, &c.cache.Namespace)
	b.Derive(&c.page.Check.Redis, &c.redis.URL)
	b.Derive(&c.page.Check.RedisConn, &c.redis)
}

func (c *applyCmd) Check() error {
	var p config.Problems
	c.checkProcess(&p)
	if c.redis.URL == "" {
		p.Add("redis.URL", "is required (redis://host:port/db or a Cluster seed list)")
	}
	cli.CheckRedis(&p, c.redis)
	if c.maxProcs < 0 {
		p.Add("maxProcs", "must not be negative (got %d)", c.maxProcs)
	}
	p.Nested("applier", c.applier.Validate())
	p.Nested("cache", c.cache.Validate())
	p.Nested("page", c.page.Validate())
	return p.Err()
}

func (c *applyCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.maxProcs > 0 {
		runtime.GOMAXPROCS(c.maxProcs)
	}
	pl := telemetry.Pipeline{Namespace: c.cache.Namespace, Topic: c.applier.Topic}
	reg := telemetry.NewRegistry(pl)
	rc := c.redis
	rc.URLFile = e.File("redis")
	tier, err := wiring.OpenTier(rc, c.cache, nil, e.Log, reg)
	if err != nil {
		return cli.UsageError(err)
	}
	defer tier.Close()
	var g lifecycle.Group
	tp, err := c.tracing(e, &g, "apply", pl)
	if err != nil {
		return err
	}
	app, err := wiring.AddApply(&g, c.applier, tier, e.Log, reg, tp)
	if err != nil {
		return err
	}
	g.Add(lifecycle.Cache, "clock guard", tier.Clock.Run)
	page, err := c.statusPage(e, "apply", reg, ready(tier.Clock.Ready, app.Ready))
	if err != nil {
		return err
	}
	return runProcess(ctx, e, c.processFlags, c.metricsAddr, reg, page, &g, probes{ready: ready(tier.Clock.Ready, app.Ready), live: ready(app.Live)})
}
