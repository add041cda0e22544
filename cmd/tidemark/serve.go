package main

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/warm"
)

// serveCmd wires flags into api.Config and cache.Config and runs the API,
// the cache client's watermark poller, the hot-set tracker (which counts the
// API's cache lookups), the auditor (elected: one per namespace audits) and
// the metrics endpoint.
type serveCmd struct {
	pgFlag
	statusPageFlag
	processFlags
	cli.KafkaFlags
	cli.TableFlags
	cli.RedisFlags
	Redis       string `field:"Redis,page.Check.Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Redis URL of the cache tier (redis://host:port/0, or a comma-separated seed list for Cluster)."`
	Namespace   string `field:"api.Namespace,cache.Namespace,audit.Namespace,warm.Namespace,replica.Namespace,page.Check.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${api_Namespace}" help:"Cache namespace (Redis key prefix); bound to one table mapping, consumer group and source pool."`
	Addr        string `field:"api.Addr" name:"addr" env:"TIDEMARK_ADDR" default:"${api_Addr}" help:"Listen address of the API."`
	MetricsAddr string `name:"metrics-addr" env:"TIDEMARK_METRICS_ADDR" default:"127.0.0.1:9103" help:"Serve the status page (/, /status.json), /metrics, /healthz, /readyz here (empty: off)."`
	Kafka       string `field:"page.Check.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka brokers (optional): adds the partition table, lag and DLQ depth to the status page, which needs them to judge freshness."`
	Topic       string `field:"page.Check.Topic" name:"topic" env:"TIDEMARK_TOPIC" default:"${page_Check_Topic}" help:"Kafka topic, for the status page."`
	Group       string `field:"page.Check.Group" name:"group" env:"TIDEMARK_GROUP" default:"${page_Check_Group}" help:"The applier's consumer group, for the status page."`
	Slot        string `field:"page.Check.Slot" name:"slot" env:"TIDEMARK_SLOT" default:"${page_Check_Slot}" help:"Replication slot shown on the status page."`

	RequestTimeout       time.Duration `field:"api.RequestTimeout" name:"request-timeout" env:"TIDEMARK_REQUEST_TIMEOUT" default:"${api_RequestTimeout}" help:"Deadline of a GET; waiting for another reader's fill ends here with 503."`
	SourceTimeout        time.Duration `field:"api.SourceTimeout" name:"source-timeout" env:"TIDEMARK_SOURCE_TIMEOUT" default:"${api_SourceTimeout}" help:"Statement timeout of one source read."`
	WriteTimeout         time.Duration `field:"api.WriteTimeout" name:"write-timeout" env:"TIDEMARK_WRITE_TIMEOUT" default:"${api_WriteTimeout}" help:"Deadline of one write transaction."`
	LookupTimeout        time.Duration `field:"api.LookupTimeout" name:"lookup-timeout" env:"TIDEMARK_LOOKUP_TIMEOUT" default:"${api_LookupTimeout}" help:"Bound of one cache lookup; past it the cache counts as down and reads go to the source under the budget."`
	ForegroundRate       float64       `field:"api.ForegroundRate" name:"source-foreground-rate" env:"TIDEMARK_SOURCE_FOREGROUND_RATE" default:"${api_ForegroundRate}" help:"Source reads/s for request-path misses, shared by all serve processes."`
	BackgroundRate       float64       `field:"api.BackgroundRate,warm.MaxRate,warm.StartRate,warm.Step" name:"source-background-rate" env:"TIDEMARK_SOURCE_BACKGROUND_RATE" default:"${api_BackgroundRate}" help:"Source reads/s for stale refreshes, shared by all serve processes."`
	Burst                time.Duration `field:"api.BudgetBurst" name:"source-burst" env:"TIDEMARK_SOURCE_BURST" default:"${api_BudgetBurst}" help:"Burst tolerance of the source budget, as a window of its rate."`
	RYWRate              float64       `field:"api.ReadYourWritesRate" name:"source-ryw-rate" env:"TIDEMARK_SOURCE_RYW_RATE" default:"${api_ReadYourWritesRate}" help:"Source reads/s for read-your-writes (min_version) reads, shared by all serve processes; each tenant gets a fair share."`
	MaxInFlight          int           `field:"api.MaxInFlight" name:"source-max-inflight" env:"TIDEMARK_SOURCE_MAX_INFLIGHT" default:"${api_MaxInFlight}" help:"Concurrent source reads per process."`
	InFlightWait         time.Duration `field:"api.InFlightWait" name:"source-inflight-wait" env:"TIDEMARK_SOURCE_INFLIGHT_WAIT" default:"${api_InFlightWait}" help:"Longest wait for a free in-flight slot before 503."`
	L1TTL                time.Duration `field:"api.L1TTL" name:"l1-ttl" env:"TIDEMARK_L1_TTL" default:"${api_L1TTL}" help:"Lifetime of the in-process hot-key cache (at most 500ms; 0 disables)."`
	L1Size               int           `field:"api.L1Size" name:"l1-size" env:"TIDEMARK_L1_SIZE" default:"${api_L1Size}" help:"Entries of the in-process hot-key cache (0 disables)."`
	IdempotencyRetention time.Duration `field:"api.IdempotencyRetention" name:"idempotency-retention" env:"TIDEMARK_IDEMPOTENCY_RETENTION" default:"${api_IdempotencyRetention}" help:"How long a write's answer is kept for retries with the same Idempotency-Key; older records are deleted in the background."`
	MaxWaitersPerKey     int           `field:"api.MaxWaitersPerKey" name:"max-waiters-per-key" env:"TIDEMARK_MAX_WAITERS_PER_KEY" default:"${api_MaxWaitersPerKey}" help:"Concurrent GETs of one item per process; beyond it 503 at once."`
	MinVersionSlack      int64         `field:"api.MinVersionSlack" name:"min-version-slack" env:"TIDEMARK_MIN_VERSION_SLACK" default:"${api_MinVersionSlack}" help:"How far min_version may be above the item's version at the source; beyond it, 400 (else 412)."`
	MinVersionMemo       time.Duration `field:"api.MinVersionMemo" name:"min-version-memo" env:"TIDEMARK_MIN_VERSION_MEMO" default:"${api_MinVersionMemo}" help:"How long a source read below min_version answers repeats with 412 without another read (0: off)."`
	MaxBody              int64         `field:"api.MaxBodyBytes" name:"max-body" env:"TIDEMARK_MAX_BODY" default:"${api_MaxBodyBytes}" help:"Largest accepted request body in bytes."`
	MaxValue             int64         `field:"api.MaxValueBytes" name:"max-value" env:"TIDEMARK_MAX_VALUE" default:"${api_MaxValueBytes}" help:"Largest value in bytes that is cached; a larger one is answered from the source but not cached (0: no limit)."`
	FillRate             float64       `field:"api.FillRate" name:"fill-rate" env:"TIDEMARK_FILL_RATE" default:"${api_FillRate}" help:"Fills/s of new keys per process, shared fairly by the tenants filling; a tenant above its share caches only keys it missed twice within 10-20s, so one tenant's scan cannot evict the others' entries (0: every miss is cached)."`
	FillTurnover         time.Duration `field:"api.FillTurnover" name:"fill-turnover" env:"TIDEMARK_FILL_TURNOVER" default:"${api_FillTurnover}" help:"Sizes --fill-rate to the cache: every serve process together may refill the whole cache (maxmemory over the mean entry size) no faster than once per this, so the default protects a small cache too (0: --fill-rate alone)."`
	SourcePool           string        `field:"api.SourcePool,page.Check.SourcePool" name:"source-pool" env:"TIDEMARK_SOURCE_POOL" default:"${api_SourcePool}" help:"Name of the shared source budget and of the rollout settings; give every namespace of one deployment the same one so a namespace upgrade runs on one budget (the default is one pool per source)."`
	RolloutDefault       string        `field:"api.RolloutDefault" name:"rollout-default" env:"TIDEMARK_ROLLOUT_DEFAULT" default:"${api_RolloutDefault}" help:"Serving mode of tenants without a rollout setting: cache (100 %), shadow or source."`
	RolloutPoll          time.Duration `field:"api.RolloutPoll" name:"rollout-poll" env:"TIDEMARK_ROLLOUT_POLL" default:"${api_RolloutPoll}" help:"How often the rollout settings are read; a change is in force within it."`
	ShadowSample         float64       `field:"api.ShadowSample" name:"shadow-sample" env:"TIDEMARK_SHADOW_SAMPLE" default:"${api_ShadowSample}" help:"Share (0-1) of a shadowed or ramping tenant's source reads also compared with the cache tier."`
	ShadowGrace          time.Duration `field:"api.ShadowGrace" name:"shadow-grace" env:"TIDEMARK_SHADOW_GRACE" default:"${api_ShadowGrace}" help:"An older cached version the cache still serves this long after the source answered newer is cache_older_than_allowed."`
	HaltMismatchRate     float64       `field:"api.HaltMismatchRate" name:"halt-mismatch-rate" env:"TIDEMARK_HALT_MISMATCH_RATE" default:"${api_HaltMismatchRate}" help:"Shadow mismatch share of a ramp step that halts the ramp back to its safe step."`
	HaltMinChecks        int           `field:"api.HaltMinChecks" name:"halt-min-checks" env:"TIDEMARK_HALT_MIN_CHECKS" default:"${api_HaltMinChecks}" help:"Shadow comparisons of a ramp step before its mismatch rate is judged."`
	AuthTTL              time.Duration `field:"api.AuthTTL" name:"auth-ttl" env:"TIDEMARK_AUTH_TTL" default:"${api_AuthTTL}" help:"How long a resolved API key is trusted before Postgres is asked again."`
	AuthStale            time.Duration `field:"api.AuthStale" name:"auth-stale" env:"TIDEMARK_AUTH_STALE" default:"${api_AuthStale}" help:"How long a known API key keeps working while Postgres cannot be asked."`

	cli.CacheFlags
	AllowEviction bool `field:"cache.AllowAllKeysEviction" name:"allow-allkeys-eviction" env:"TIDEMARK_ALLOW_ALLKEYS_EVICTION" help:"Start even if Redis's maxmemory-policy is allkeys-*, which may evict the watermark hash (use volatile-lru instead)."`

	HotThreshold   float64       `field:"replica.Threshold" name:"hot-threshold" env:"TIDEMARK_HOT_THRESHOLD" default:"${replica_Threshold}" help:"Read rate (reads/s over every serve process, from the fast hot-set estimate) from which a key gets read replicas on other Redis masters (0: off)."`
	HotReplicas    int           `field:"replica.Replicas" name:"hot-replicas" env:"TIDEMARK_HOT_REPLICAS" default:"${replica_Replicas}" help:"Copies per hot key (0: auto, ceil(rate / --hot-safe-qps) x 2, at most 8)."`
	HotSafeQPS     float64       `field:"replica.SafeQPSPerShard" name:"hot-safe-qps" env:"TIDEMARK_HOT_SAFE_QPS" default:"${replica_SafeQPSPerShard}" help:"Reads/s of one key a Redis master takes with headroom, for --hot-replicas auto."`
	HotManifestTTL time.Duration `field:"api.ReplicaManifestTTL,replica.ManifestTTL" name:"hot-manifest-ttl" env:"TIDEMARK_HOT_MANIFEST_TTL" default:"${replica_ManifestTTL}" help:"How long a process uses a hot key's replica manifest learnt from a lookup (at most 500ms; 0: never read replicas)."`

	AuditRate  float64       `field:"AuditRate,audit.Rate" name:"audit-rate" env:"TIDEMARK_AUDIT_RATE" default:"${audit_Rate}" help:"Cached entries per second the elected auditor compares with Postgres, under the background budget (0: no auditor in this process)."`
	WarmTop    int           `field:"WarmTop,warm.Top" name:"warm-top" env:"TIDEMARK_WARM_TOP" default:"${warm_Top}" help:"Hottest keys the elected warmer fills after the cache tier loses data (0: no warmer in this process)."`
	AuditGrace time.Duration `field:"audit.Grace" name:"audit-grace" env:"TIDEMARK_AUDIT_GRACE" default:"${audit_Grace}" help:"An entry behind its source for less than this is the pipeline still delivering, not a violation."`
}

func (c *serveCmd) apiConfig() api.Config {
	cfg := api.DefaultConfig()
	cfg.Addr, cfg.Namespace, cfg.Table = c.Addr, c.Namespace, c.CatalogTable()
	cfg.RequestTimeout, cfg.SourceTimeout, cfg.WriteTimeout = c.RequestTimeout, c.SourceTimeout, c.WriteTimeout
	cfg.LookupTimeout = c.LookupTimeout
	cfg.ForegroundRate, cfg.BackgroundRate, cfg.BudgetBurst = c.ForegroundRate, c.BackgroundRate, c.Burst
	cfg.ReadYourWritesRate, cfg.MaxInFlight, cfg.InFlightWait = c.RYWRate, c.MaxInFlight, c.InFlightWait
	cfg.L1TTL, cfg.L1Size, cfg.MaxBodyBytes = c.L1TTL, c.L1Size, c.MaxBody
	cfg.AuthTTL, cfg.AuthStale = c.AuthTTL, c.AuthStale
	cfg.MinVersionSlack, cfg.MinVersionMemo = c.MinVersionSlack, c.MinVersionMemo
	cfg.IdempotencyRetention, cfg.MaxWaitersPerKey = c.IdempotencyRetention, c.MaxWaitersPerKey
	cfg.ReplicaManifestTTL = c.HotManifestTTL
	cfg.MaxValueBytes, cfg.FillRate, cfg.FillTurnover = c.MaxValue, c.FillRate, c.FillTurnover
	cfg.SourcePool, cfg.RolloutDefault, cfg.RolloutPoll = c.SourcePool, c.RolloutDefault, c.RolloutPoll
	cfg.ShadowSample, cfg.ShadowGrace = c.ShadowSample, c.ShadowGrace
	cfg.HaltMismatchRate, cfg.HaltMinChecks = c.HaltMismatchRate, c.HaltMinChecks
	return cfg
}

func (c *serveCmd) replicaConfig() replica.Config {
	cfg := replica.DefaultConfig()
	cfg.Namespace, cfg.Threshold, cfg.Replicas, cfg.SafeQPSPerShard = c.Namespace, c.HotThreshold, c.HotReplicas, c.HotSafeQPS
	cfg.ManifestTTL = c.HotManifestTTL
	return cfg
}

func (c *serveCmd) cacheConfig() cache.Config {
	cfg := c.CacheTier(c.Namespace)
	cfg.AllowAllKeysEviction = c.AllowEviction
	return cfg
}

// auditConfig is the elected auditor's; --audit-rate 0 runs none.
func (c *serveCmd) auditConfig() audit.Config {
	cfg := audit.DefaultConfig()
	cfg.Namespace, cfg.Grace, cfg.Table = c.Namespace, c.AuditGrace, c.CatalogTable()
	if c.AuditRate > 0 {
		cfg.Rate = c.AuditRate
	}
	return cfg
}

// warmConfig is the elected warmer's: it paces itself within the background
// budget, from an eighth of it; --warm-top 0 runs none.
func (c *serveCmd) warmConfig() warm.Config {
	cfg := wiring.PaceWarm(warm.DefaultConfig(), c.BackgroundRate)
	cfg.Namespace = c.Namespace
	if c.WarmTop > 0 {
		cfg.Top = c.WarmTop
	}
	return cfg
}

func (c *serveCmd) Validate() error {
	var p config.Problems
	c.require(&p)
	c.ValidateRedis(&p, c.Redis)
	c.processFlags.validate(&p)
	cli.ValidateAs(&p, "table", c.CatalogTable().Validate())
	if c.Redis == "" {
		p.Add("Redis", "is required")
	}
	if c.AuditRate < 0 {
		p.Add("AuditRate", "must not be negative (0 turns the auditor off)")
	}
	if c.WarmTop < 0 {
		p.Add("WarmTop", "must not be negative (0 turns the warmer off)")
	}
	cli.ValidateAs(&p, "api", c.apiConfig().Validate())
	cli.ValidateAs(&p, "cache", c.cacheConfig().Validate())
	cli.ValidateAs(&p, "audit", c.auditConfig().Validate())
	cli.ValidateAs(&p, "warm", c.warmConfig().Validate())
	cli.ValidateAs(&p, "replica", c.replicaConfig().Validate())
	cli.ValidateAs(&p, "page", c.pageConfig(c.target()).Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *serveCmd) Run(ctx context.Context, e *cli.Env) error {
	log := e.Log
	acfg := c.apiConfig()
	acfg.PGFile = e.File("pg")
	pool, err := api.NewPool(ctx, c.PG, acfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pl := telemetry.Pipeline{Namespace: c.Namespace, Topic: c.Topic}
	reg := telemetry.NewRegistry(pl)
	rc := c.RedisConn(c.Redis)
	rc.URLFile = e.File("redis")
	tier, err := wiring.OpenTier(rc, c.cacheConfig(), pool, log, reg)
	if err != nil {
		return cli.UsageError(err)
	}
	defer tier.Close()
	hcfg := hotset.DefaultConfig()
	hcfg.Namespace = c.Namespace
	var g lifecycle.Group
	tp, err := c.tracing(e, &g, "serve", pl)
	if err != nil {
		return err
	}
	srv, err := wiring.AddServe(ctx, &g, wiring.Serve{API: acfg, Hot: hcfg, Audit: c.auditConfig(), Warm: c.warmConfig(),
		Replica: c.replicaConfig(), RunAudit: c.AuditRate > 0, RunWarm: c.WarmTop > 0}, tier, pool, log, reg, tp)
	if err != nil {
		return evictionFlag(err)
	}
	tier.Add(&g)
	page, err := c.page(e, "serve", c.target(), reg, ready(srv.Ready))
	if err != nil {
		return err
	}
	return runProcess(ctx, e, c.processFlags, c.MetricsAddr, reg, page, &g, probes{ready: ready(srv.Ready)})
}

func (c *serveCmd) target() statusTarget {
	return statusTarget{c.Kafka, c.Redis, c.PG, c.Topic, c.Group, c.Namespace, c.Slot, c.KafkaConn(), c.RedisConn(c.Redis), c.SourcePool}
}
