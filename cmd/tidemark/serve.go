package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"tidemark/api"
	"tidemark/audit"
	"tidemark/cache"
	"tidemark/hotset"
	"tidemark/internal/telemetry"
	"tidemark/replica"
	"tidemark/warm"
)

// serveCmd wires flags into api.Config and cache.Config and runs the API,
// the cache client's watermark poller, the hot-set tracker (which counts the
// API's cache lookups), the auditor (elected: one per namespace audits) and
// the metrics endpoint.
type serveCmd struct {
	pgFlag
	statusPageFlag
	Redis       string `name:"redis" env:"TIDEMARK_REDIS" help:"Redis URL of the cache tier (redis://host:port/0, or a comma-separated seed list for Cluster)."`
	Namespace   string `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"catalog" help:"Cache namespace (Redis key prefix); also names the shared source budget."`
	Addr        string `name:"addr" env:"TIDEMARK_ADDR" default:"127.0.0.1:8080" help:"Listen address of the API."`
	MetricsAddr string `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9103" help:"Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off)."`
	Kafka       string `name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka brokers (optional): adds the partition table, lag and DLQ depth to the status page, which needs them to judge freshness."`
	Topic       string `name:"topic" env:"TIDEMARK_TOPIC" default:"tidemark.invalidations" help:"Kafka topic, for the status page."`
	Group       string `name:"group" env:"TIDEMARK_GROUP" default:"tidemark-applier" help:"The applier's consumer group, for the status page."`
	Slot        string `name:"slot" env:"TIDEMARK_SLOT" default:"tidemark" help:"Replication slot shown on the status page."`

	RequestTimeout       time.Duration `name:"request-timeout" env:"TIDEMARK_REQUEST_TIMEOUT" default:"1s" help:"Deadline of a GET; waiting for another reader's fill ends here with 503."`
	SourceTimeout        time.Duration `name:"source-timeout" env:"TIDEMARK_SOURCE_TIMEOUT" default:"1s" help:"Statement timeout of one source read."`
	WriteTimeout         time.Duration `name:"write-timeout" env:"TIDEMARK_WRITE_TIMEOUT" default:"5s" help:"Deadline of one write transaction."`
	LookupTimeout        time.Duration `name:"lookup-timeout" env:"TIDEMARK_LOOKUP_TIMEOUT" default:"250ms" help:"Bound of one cache lookup; past it the cache counts as down and reads go to the source under the budget."`
	ForegroundRate       float64       `name:"source-foreground-rate" env:"TIDEMARK_SOURCE_FOREGROUND_RATE" default:"12000" help:"Source reads/s for request-path misses, shared by all serve processes."`
	BackgroundRate       float64       `name:"source-background-rate" env:"TIDEMARK_SOURCE_BACKGROUND_RATE" default:"8000" help:"Source reads/s for stale refreshes, shared by all serve processes."`
	Burst                time.Duration `name:"source-burst" env:"TIDEMARK_SOURCE_BURST" default:"100ms" help:"Burst tolerance of the source budget, as a window of its rate."`
	RYWRate              float64       `name:"source-ryw-rate" env:"TIDEMARK_SOURCE_RYW_RATE" default:"3000" help:"Source reads/s for read-your-writes (min_version) reads, shared by all serve processes; each tenant gets a fair share."`
	MaxInFlight          int           `name:"source-max-inflight" env:"TIDEMARK_SOURCE_MAX_INFLIGHT" default:"32" help:"Concurrent source reads per process."`
	InFlightWait         time.Duration `name:"source-inflight-wait" env:"TIDEMARK_SOURCE_INFLIGHT_WAIT" default:"100ms" help:"Longest wait for a free in-flight slot before 503."`
	L1TTL                time.Duration `name:"l1-ttl" env:"TIDEMARK_L1_TTL" default:"500ms" help:"Lifetime of the in-process hot-key cache (at most 500ms; 0 disables)."`
	L1Size               int           `name:"l1-size" env:"TIDEMARK_L1_SIZE" default:"10000" help:"Entries of the in-process hot-key cache (0 disables)."`
	IdempotencyRetention time.Duration `name:"idempotency-retention" env:"TIDEMARK_IDEMPOTENCY_RETENTION" default:"24h" help:"How long a write's answer is kept for retries with the same Idempotency-Key; older records are deleted in the background."`
	MaxWaitersPerKey     int           `name:"max-waiters-per-key" env:"TIDEMARK_MAX_WAITERS_PER_KEY" default:"256" help:"Concurrent GETs of one item per process; beyond it 503 at once."`
	MinVersionSlack      int64         `name:"min-version-slack" env:"TIDEMARK_MIN_VERSION_SLACK" default:"1000" help:"How far min_version may be above the newest version the cache knows for the item; beyond it, 400."`
	MinVersionMemo       time.Duration `name:"min-version-memo" env:"TIDEMARK_MIN_VERSION_MEMO" default:"1s" help:"How long a source read below min_version answers repeats with 412 without another read (0: off)."`
	MaxBody              int64         `name:"max-body" env:"TIDEMARK_MAX_BODY" default:"65536" help:"Largest accepted request body in bytes."`
	AuthTTL              time.Duration `name:"auth-ttl" env:"TIDEMARK_AUTH_TTL" default:"30s" help:"How long a resolved API key is trusted before Postgres is asked again."`
	AuthStale            time.Duration `name:"auth-stale" env:"TIDEMARK_AUTH_STALE" default:"10m" help:"How long a known API key keeps working while Postgres cannot be asked."`

	CacheLease        time.Duration `name:"cache-lease" env:"TIDEMARK_CACHE_LEASE" default:"1s" help:"Fill lease lifetime (must match the applier's)."`
	CacheHardLifetime time.Duration `name:"cache-hard-lifetime" env:"TIDEMARK_CACHE_HARD_LIFETIME" default:"29.8s" help:"Hard lifetime of a cached value from its effective observation."`
	CacheSoftMin      time.Duration `name:"cache-soft-min" env:"TIDEMARK_CACHE_SOFT_MIN" default:"3s" help:"Soft expiry lower bound (jittered up to --cache-soft-max)."`
	CacheSoftMax      time.Duration `name:"cache-soft-max" env:"TIDEMARK_CACHE_SOFT_MAX" default:"5s" help:"Soft expiry upper bound."`
	CacheNegativeTTL  time.Duration `name:"cache-negative-ttl" env:"TIDEMARK_CACHE_NEGATIVE_TTL" default:"2s" help:"Lifetime of a not-found entry."`
	AllowEviction     bool          `name:"allow-allkeys-eviction" env:"TIDEMARK_ALLOW_ALLKEYS_EVICTION" help:"Start even if Redis's maxmemory-policy is allkeys-*, which may evict the watermark hash (use volatile-lru instead)."`

	HotThreshold   float64       `name:"hot-threshold" env:"TIDEMARK_HOT_THRESHOLD" default:"0" help:"Read rate (reads/s over every serve process, from the shared hot set) from which a key gets read replicas on other Redis masters (0: off)."`
	HotReplicas    int           `name:"hot-replicas" env:"TIDEMARK_HOT_REPLICAS" default:"0" help:"Copies per hot key (0: auto, ceil(rate / --hot-safe-qps) x 2, at most 8)."`
	HotSafeQPS     float64       `name:"hot-safe-qps" env:"TIDEMARK_HOT_SAFE_QPS" default:"20000" help:"Reads/s of one key a Redis master takes with headroom, for --hot-replicas auto."`
	HotManifestTTL time.Duration `name:"hot-manifest-ttl" env:"TIDEMARK_HOT_MANIFEST_TTL" default:"500ms" help:"How long a process uses a hot key's replica manifest learnt from a lookup (at most 500ms; 0: never read replicas)."`

	AuditRate  float64       `name:"audit-rate" env:"TIDEMARK_AUDIT_RATE" default:"200" help:"Cached entries per second the elected auditor compares with Postgres, under the background budget (0: no auditor in this process)."`
	WarmTop    int           `name:"warm-top" env:"TIDEMARK_WARM_TOP" default:"20000" help:"Hottest keys the elected warmer fills after the cache tier loses data (0: no warmer in this process)."`
	AuditGrace time.Duration `name:"audit-grace" env:"TIDEMARK_AUDIT_GRACE" default:"5s" help:"An entry behind its source for less than this is the pipeline still delivering, not a violation."`
}

func (c *serveCmd) apiConfig() api.Config {
	cfg := api.DefaultConfig()
	cfg.Addr, cfg.Namespace = c.Addr, c.Namespace
	cfg.RequestTimeout, cfg.SourceTimeout, cfg.WriteTimeout = c.RequestTimeout, c.SourceTimeout, c.WriteTimeout
	cfg.LookupTimeout = c.LookupTimeout
	cfg.ForegroundRate, cfg.BackgroundRate, cfg.BudgetBurst = c.ForegroundRate, c.BackgroundRate, c.Burst
	cfg.ReadYourWritesRate, cfg.MaxInFlight, cfg.InFlightWait = c.RYWRate, c.MaxInFlight, c.InFlightWait
	cfg.L1TTL, cfg.L1Size, cfg.MaxBodyBytes = c.L1TTL, c.L1Size, c.MaxBody
	cfg.AuthTTL, cfg.AuthStale = c.AuthTTL, c.AuthStale
	cfg.MinVersionSlack, cfg.MinVersionMemo = c.MinVersionSlack, c.MinVersionMemo
	cfg.IdempotencyRetention, cfg.MaxWaitersPerKey = c.IdempotencyRetention, c.MaxWaitersPerKey
	cfg.ReplicaManifestTTL = c.HotManifestTTL
	return cfg
}

func (c *serveCmd) replicaConfig() replica.Config {
	cfg := replica.DefaultConfig()
	cfg.Namespace, cfg.Threshold, cfg.Replicas, cfg.SafeQPSPerShard = c.Namespace, c.HotThreshold, c.HotReplicas, c.HotSafeQPS
	cfg.ManifestTTL = c.HotManifestTTL
	return cfg
}

func (c *serveCmd) cacheConfig() cache.Config {
	cfg := cache.DefaultConfig()
	cfg.Namespace = c.Namespace
	cfg.Lease, cfg.HardLifetime = c.CacheLease, c.CacheHardLifetime
	cfg.SoftMin, cfg.SoftMax, cfg.NegativeTTL = c.CacheSoftMin, c.CacheSoftMax, c.CacheNegativeTTL
	cfg.AllowAllKeysEviction = c.AllowEviction
	return cfg
}

func (c *serveCmd) Validate() error {
	p := c.problems()
	if c.Redis == "" {
		p = append(p, "--redis (TIDEMARK_REDIS) is required")
	}
	if c.AuditRate < 0 {
		p = append(p, "--audit-rate must not be negative (0 turns the auditor off)")
	}
	if c.WarmTop < 0 {
		p = append(p, "--warm-top must not be negative (0 turns the warmer off)")
	}
	if c.AuditGrace <= 0 {
		p = append(p, "--audit-grace must be positive")
	}
	var errs []error
	if len(p) > 0 {
		errs = append(errs, joinProblems(p))
	}
	errs = append(errs, c.apiConfig().Validate())
	if err := c.cacheConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.replicaConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		// Both configs check --namespace: say each problem once.
		var lines []string
		for _, l := range strings.Split(err.Error(), "\n") {
			if !slices.Contains(lines, l) {
				lines = append(lines, l)
			}
		}
		return errors.New(strings.Join(lines, "\n"))
	}
	return nil
}

func (c *serveCmd) Run(ctx context.Context, e *env) error {
	log := e.log
	acfg, ccfg := c.apiConfig(), c.cacheConfig()
	rdb, err := cache.ParseRedisURL(c.Redis)
	if err != nil {
		return usageError(err)
	}
	defer rdb.Close()
	pool, err := api.NewPool(ctx, c.PG, acfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := telemetry.NewRegistry()
	cc, err := cache.New(ccfg, rdb, log, reg)
	if err != nil {
		return err
	}
	if err := checkEvictionPolicy(ctx, cc, log); err != nil {
		return err
	}
	hcfg := hotset.DefaultConfig()
	hcfg.Namespace = c.Namespace
	hot, err := hotset.New(hcfg, rdb, log, reg)
	if err != nil {
		return err
	}
	clock, err := newClockGuard(rdb, pool, log, reg)
	if err != nil {
		return err
	}
	clock.Check(ctx) // an unmeasured clock is not trusted: measure before serving
	srv, err := api.New(acfg, api.Deps{Pool: pool, Cache: hotset.Counted{Cache: cc, T: hot}, Redis: rdb, Log: log, Registerer: reg, Clock: clock})
	if err != nil {
		return err
	}
	acfgAudit := audit.DefaultConfig()
	acfgAudit.Namespace, acfgAudit.Grace = c.Namespace, c.AuditGrace
	if c.AuditRate > 0 {
		acfgAudit.Rate = c.AuditRate
	}
	aud, err := audit.New(acfgAudit, audit.Deps{Redis: rdb, DB: pool, Cache: cc, Budget: srv, Log: log, Registerer: reg})
	if err != nil {
		return err
	}
	wcfg := warm.DefaultConfig()
	wcfg.Namespace, wcfg.MaxRate = c.Namespace, c.BackgroundRate
	wcfg.StartRate, wcfg.Step = c.BackgroundRate/8, c.BackgroundRate/8
	if c.WarmTop > 0 {
		wcfg.Top = c.WarmTop
	}
	warmer, err := warm.New(wcfg, warm.Deps{Redis: rdb, Cache: cc, Source: srv, Log: log, Registerer: reg})
	if err != nil {
		return err
	}
	reps, err := replica.New(c.replicaConfig(), replica.Deps{Cache: cc, Hot: hotset.HotKeys(rdb, c.Namespace), Log: log, Registerer: reg})
	if err != nil {
		return err
	}
	tel, err := telemetry.NewServer(c.MetricsAddr, reg, log, srv.Ready)
	if err != nil {
		return err
	}
	page, err := c.page(e, "serve", statusTarget{c.Kafka, c.Redis, c.PG, c.Topic, c.Group, c.Namespace, c.Slot}, reg)
	if err != nil {
		return err
	}
	tel.Handle("/", page.Handler())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return cc.Run(ctx) })
	g.Go(func() error { return hot.Run(ctx) })
	g.Go(func() error { return reps.Run(ctx) })
	g.Go(func() error { return clock.Run(ctx) })
	if c.AuditRate > 0 {
		g.Go(func() error { return aud.Run(ctx) })
	}
	if c.WarmTop > 0 {
		g.Go(func() error { return warmer.Run(ctx) })
	}
	g.Go(func() error { return srv.Run(ctx) })
	g.Go(func() error { return tel.Run(ctx) })
	g.Go(func() error { return page.Run(ctx) })
	return g.Wait()
}
