package main

import (
	"context"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/warm"
)

// serveCmd binds its flags into api.Config, cache.Config and the configs of
// the parts that work for the API, and runs the API, the cache client's
// watermark poller, the hot-set tracker (which counts the API's cache
// lookups), the auditor (elected: one per namespace audits) and the metrics
// endpoint.
type serveCmd struct {
	pgFlag
	statusPageFlag
	processFlags
	api         api.Config
	cache       cache.Config
	redis       cache.RedisConfig
	table       catalog.Table
	audit       audit.Config
	warm        warm.Config
	replica     replica.Config
	metricsAddr string
	auditRate   float64 // 0: no auditor in this process
	warmTop     int     // 0: no warmer in this process
}

func (c *serveCmd) Bind(b *cli.Binder) {
	c.api, c.cache, c.redis, c.table = api.DefaultConfig(), cache.DefaultConfig(), cache.DefaultRedisConfig(), catalog.DefaultTable()
	c.audit, c.warm, c.replica = audit.DefaultConfig(), warm.DefaultConfig(), replica.DefaultConfig()
	c.metricsAddr, c.auditRate, c.warmTop = "127.0.0.1:9103", c.audit.Rate, c.warm.Top
	c.bindPG(b)
	c.bindPage(b)
	c.bindProcess(b)
	cli.KafkaFlags(b, &c.page.Check.Kafka)
	cli.TableFlags(b, &c.table)
	cli.RedisFlags(b, &c.redis, "Redis URL of the cache tier (redis://host:port/0, or a comma-separated seed list for Cluster).")
	b.Flag(&c.cache.Namespace, "namespace", "Cache namespace (Redis key prefix); bound to one table mapping, consumer group and source pool.")
	b.Flag(&c.api.Addr, "addr", "Listen address of the API.")
	b.Flag(&c.metricsAddr, "metrics-addr", "Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off).")
	b.Flag(&c.page.Check.Brokers, "kafka", "Kafka brokers (optional): adds the partition table, lag and DLQ depth to the status page, which needs them to judge freshness.")
	b.Flag(&c.page.Check.Topic, "topic", "Kafka topic, for the status page.")
	b.Flag(&c.page.Check.Group, "group", "The applier's consumer group, for the status page.")
	b.Flag(&c.page.Check.Slot, "slot", "Replication slot shown on the status page.")

	a := &c.api
	b.Flag(&a.RequestTimeout, "request-timeout", "Deadline of a GET; waiting for another reader's fill ends here with 503.")
	b.Flag(&a.SourceTimeout, "source-timeout", "Statement timeout of one source read.")
	b.Flag(&a.WriteTimeout, "write-timeout", "Deadline of one write transaction.")
	b.Flag(&a.LookupTimeout, "lookup-timeout", "Bound of one cache lookup; past it the cache counts as down and reads go to the source under the budget.")
	b.Flag(&a.LookupBatch, "lookup-batch", "Most cache lookups of coinciding L1 misses sent in one pipelined round trip (those arriving while one is in flight wait for it, at most 10ms); 0 or 1: each alone.")
	b.Flag(&a.ForegroundRate, "source-foreground-rate", "Source reads/s for request-path misses, shared by all serve processes.")
	b.Flag(&a.BackgroundRate, "source-background-rate", "Source reads/s for stale refreshes, shared by all serve processes.")
	b.Flag(&a.BudgetBurst, "source-burst", "Burst tolerance of the source budget, as a window of its rate.")
	b.Flag(&a.ReadYourWritesRate, "source-ryw-rate", "Source reads/s for read-your-writes (min_version) reads, shared by all serve processes, inside the total and at most --source-foreground-rate (0: a quarter of it); each tenant gets a fair share.")
	b.Flag(&a.MaxInFlight, "source-max-inflight", "Concurrent source reads per process.")
	b.Flag(&a.InFlightWait, "source-inflight-wait", "Longest wait for a free in-flight slot before 503.")
	b.Flag(&a.L1TTL, "l1-ttl", "Lifetime of the in-process hot-key cache (at most 500ms; 0 disables).")
	b.Flag(&a.L1Size, "l1-size", "Entries of the in-process hot-key cache (0 disables).")
	b.Flag(&a.IdempotencyRetention, "idempotency-retention", "How long a write's answer is kept for retries with the same Idempotency-Key; older records are deleted in the background.")
	b.Flag(&a.MaxWaitersPerKey, "max-waiters-per-key", "Concurrent GETs of one item per process; beyond it 503 at once.")
	b.Flag(&a.MinVersionSlack, "min-version-slack", "How far min_version may be above the item's version at the source; beyond it, 400 (else 412).")
	b.Flag(&a.MinVersionMemo, "min-version-memo", "How long a source read below min_version answers repeats with 412 without another read (0: off).")
	b.Flag(&a.MaxBodyBytes, "max-body", "Largest accepted request body in bytes.")
	b.Flag(&a.MaxValueBytes, "max-value", "Largest value in bytes that is cached; a larger one is answered from the source but not cached (0: no limit).")
	b.Flag(&a.FillRate, "fill-rate", "Fills/s of new keys per process, shared fairly by the tenants filling; a tenant above its share caches only keys it missed twice within 10-20s, so one tenant's scan cannot evict the others' entries (0: every miss is cached).")
	b.Flag(&a.FillTurnover, "fill-turnover", "Sizes --fill-rate to the cache: every serve process together may refill the whole cache (maxmemory over the mean entry size) no faster than once per this, so the default protects a small cache too (0: --fill-rate alone).")
	b.Flag(&a.SourcePool, "source-pool", "Name of the shared source budget and of the rollout settings; give every namespace of one deployment the same one so a namespace upgrade runs on one budget (the default is one pool per source; pools reading one source split its budget evenly).")
	b.Flag(&a.RolloutDefault, "rollout-default", "Serving mode of tenants without a rollout setting: cache (100 %), shadow or source.")
	b.Flag(&a.RolloutPoll, "rollout-poll", "How often the rollout settings are read; a change is in force within it.")
	b.Flag(&a.ShadowSample, "shadow-sample", "Share (0-1) of a shadowed or ramping tenant's source reads also compared with the cache tier.")
	b.Flag(&a.ShadowGrace, "shadow-grace", "An older cached version the cache still serves this long after the source answered newer is cache_older_than_allowed.")
	b.Flag(&a.HaltMismatchRate, "halt-mismatch-rate", "Shadow mismatch share of a ramp step that halts the ramp back to its safe step.")
	b.Flag(&a.HaltMinChecks, "halt-min-checks", "Shadow comparisons of a ramp step before its mismatch rate is judged.")
	b.Flag(&a.AuthTTL, "auth-ttl", "How long a resolved API key is trusted before Postgres is asked again.")
	b.Flag(&a.AuthStale, "auth-stale", "How long a known API key keeps working while Postgres cannot be asked.")

	cli.CacheFlags(b, &c.cache)
	cli.EvictionFlag(b, &c.cache)

	b.Flag(&c.replica.Threshold, "hot-threshold", "Read rate (reads/s over every serve process, from the fast hot-set estimate) from which a key gets read replicas on other Redis masters (0: off).")
	b.Flag(&c.replica.Replicas, "hot-replicas", "Copies per hot key (0: auto, ceil(rate / --hot-safe-qps) x 2, at most 8).")
	b.Flag(&c.replica.SafeQPSPerShard, "hot-safe-qps", "Reads/s of one key a Redis master takes with headroom, for --hot-replicas auto.")
	b.Flag(&c.replica.ManifestTTL, "hot-manifest-ttl", "How long a process uses a hot key's replica manifest learnt from a lookup (at most 500ms; 0: never read replicas).")

	b.Flag(&c.auditRate, "audit-rate", "Cached entries per second the elected auditor compares with Postgres, under the background budget (0: no auditor in this process).")
	b.Flag(&c.warmTop, "warm-top", "Hottest keys the elected warmer fills after the cache tier loses data (0: no warmer in this process).")
	b.Flag(&c.audit.Grace, "audit-grace", "An entry behind its source for less than this is the pipeline still delivering, not a violation.")

	// One fact, one flag: the parts that work for the API take the
	// namespace, the table and the hot keys' manifest lifetime from it.
	for _, ns := range []*string{&c.api.Namespace, &c.audit.Namespace, &c.warm.Namespace, &c.replica.Namespace, &c.page.Check.Namespace} {
		b.Derive(ns, &c.cache.Namespace)
	}
	b.Derive(&c.api.Table, &c.table)
	b.Derive(&c.audit.Table, &c.table)
	b.Derive(&c.api.ReplicaManifestTTL, &c.replica.ManifestTTL)
	b.Derive(&c.page.Check.Redis, &c.redis.URL)
	b.Derive(&c.page.Check.RedisConn, &c.redis)
	b.Derive(&c.page.Check.PG, &c.pg)
	b.Derive(&c.page.Check.SourcePool, &c.api.SourcePool)
	b.Computed(&c.audit.Rate, &c.auditRate)
	b.Computed(&c.warm.Top, &c.warmTop)
	for _, r := range []*float64{&c.warm.MaxRate, &c.warm.StartRate, &c.warm.Step} {
		b.Computed(r, &c.api.BackgroundRate)
	}
}

func (c *serveCmd) Check() error {
	// The elected auditor and warmer run only when asked for; the warmer
	// paces itself within the background budget, from an eighth of it.
	if c.auditRate > 0 {
		c.audit.Rate = c.auditRate
	}
	if c.warmTop > 0 {
		c.warm.Top = c.warmTop
	}
	c.warm = wiring.PaceWarm(c.warm, c.api.BackgroundRate)
	var p config.Problems
	c.require(&p)
	cli.CheckRedis(&p, c.redis)
	c.checkProcess(&p)
	p.Nested("table", c.table.Validate())
	if c.redis.URL == "" {
		p.Add("redis.URL", "is required")
	}
	if c.auditRate < 0 {
		p.Add("auditRate", "must not be negative (0 turns the auditor off)")
	}
	if c.warmTop < 0 {
		p.Add("warmTop", "must not be negative (0 turns the warmer off)")
	}
	p.Nested("api", c.api.Validate())
	p.Nested("cache", c.cache.Validate())
	p.Nested("audit", c.audit.Validate())
	p.Nested("warm", c.warm.Validate())
	p.Nested("replica", c.replica.Validate())
	p.Nested("page", c.page.Validate())
	return p.Err()
}

func (c *serveCmd) Run(ctx context.Context, e *cli.Env) error {
	log := e.Log
	acfg := c.api
	acfg.PGFile = e.File("pg")
	pool, err := api.NewPool(ctx, c.pg, acfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pl := telemetry.Pipeline{Namespace: c.cache.Namespace, Topic: c.page.Check.Topic}
	reg := telemetry.NewRegistry(pl)
	rc := c.redis
	rc.URLFile = e.File("redis")
	tier, err := wiring.OpenTier(rc, c.cache, pool, log, reg)
	if err != nil {
		return cli.UsageError(err)
	}
	defer tier.Close()
	hcfg := hotset.DefaultConfig()
	hcfg.Namespace = c.cache.Namespace
	var g lifecycle.Group
	tp, err := c.tracing(e, &g, "serve", pl)
	if err != nil {
		return err
	}
	srv, err := wiring.AddServe(ctx, &g, wiring.Serve{API: acfg, Hot: hcfg, Audit: c.audit, Warm: c.warm,
		Replica: c.replica, RunAudit: c.auditRate > 0, RunWarm: c.warmTop > 0}, tier, pool, log, reg, tp)
	if err != nil {
		return evictionFlag(err)
	}
	tier.Add(&g)
	page, err := c.statusPage(e, "serve", reg, ready(srv.Ready))
	if err != nil {
		return err
	}
	return runProcess(ctx, e, c.processFlags, c.metricsAddr, reg, page, &g, probes{ready: ready(srv.Ready)})
}
