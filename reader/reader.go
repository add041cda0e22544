// Package reader is the read path that keeps the freshness promise: a read
// of (tenant, item) answered from the cache tier when it can be, from the
// source otherwise, never with a value older than the promise allows.
//
// A Reader carries the whole algorithm: the hot-key L1, hot-key replicas,
// the cache tier's lease (one reader per key fills it), singleflight per key
// in this process, the fill, the request and source deadlines, the last
// check of the hard deadline right before an answer, the source budget
// shared by every reader of one pool (foreground, background and
// read-your-writes classes, a fair share per tenant), and the clock guard (a
// host whose clock is out of bounds answers from the source only). The
// caller supplies the source as a Source: one read of one item.
// docs/design.md, "Read path", is the contract.
package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/clockguard"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/replica"
)

// Source is where the truth is: one read of one item, of the primary (a
// replica's lag would break the promise). It is called only with the budget
// admitted, and ctx ends SourceTimeout (and a margin) after the call;
// ClassOf(ctx) tells which budget class the read is metered in, so a source
// can tell the classes apart (TableSource runs a statement per class). An
// error is never an answer about the item: the read is answered from a
// cached fallback or with Unavailable.
type Source interface {
	Read(ctx context.Context, tenant, item string) (Item, error)
}

// SourceFunc is a function as a Source.
type SourceFunc func(ctx context.Context, tenant, item string) (Item, error)

// Read calls f.
func (f SourceFunc) Read(ctx context.Context, tenant, item string) (Item, error) {
	return f(ctx, tenant, item)
}

// Item is what a source read found.
type Item struct {
	// Found: a live item. False: absent, or deleted (a tombstone, whose
	// Version then says which write deleted it).
	Found   bool
	Version int64  // increases with every write of the item
	Payload []byte // the value answered (JSON for the reference API); nil when not Found
}

// exists reports whether the source has a row for the item (live or a
// tombstone with its version).
func (it Item) exists() bool { return it.Found || it.Version > 0 }

// Cache is the part of the cache-tier client (*cache.Client) a Reader uses.
// A Reader never writes item values itself: it only fills the leases the
// cache hands out; invalidations come through the pipeline.
type Cache interface {
	Lookup(ctx context.Context, tenant, item string, minVersion int64) (cache.LookupResult, error)
	// LookupMany is Lookup (min_version 0) of many items in one round trip.
	LookupMany(ctx context.Context, tenant string, items []string) ([]cache.LookupResult, []error, error)
	Fill(ctx context.Context, tenant, item string, tok cache.Token, version int64, payload []byte, obs time.Time) error
	FillNotFound(ctx context.Context, tenant, item string, tok cache.Token, obs time.Time) error
	Release(ctx context.Context, tenant, item string, tok cache.Token) (bool, error)
	Config() cache.Config
	Floor(ctx context.Context, tenant, item string) (int64, error)
	ReadReplica(ctx context.Context, tenant, item string, m cache.Manifest, i int) (cache.Entry, error)
	Memory(ctx context.Context) (cache.Memory, error)
	ClaimIdentity(ctx context.Context, id cache.Identity) error
	// ExpectSource and SetSource: the watermark vouches only for resolved
	// markers of this process's source, unknown until it is told
	// (cache/source.go); the API server tells it (api.Server.runSource).
	ExpectSource()
	SetSource(source string)
}

// Clock is the process's guarded clock (*clockguard.Guard): Now is the
// Redis-synchronised time deadlines are judged by, Wall the host's own, and
// Trusted whether the host is within the clock bound.
type Clock interface {
	Now() time.Time
	Wall() time.Time
	Trusted() bool
}

// Deps are the connections a Reader uses; the caller owns them (and runs
// the cache client's watermark poller, cache.Client.Run).
type Deps struct {
	Source Source                // required
	Cache  Cache                 // required: the cache tier
	Redis  redis.UniversalClient // required: the shared source budget (and the clock guard, when Clock is nil)
	// SourceDB: the source's primary, where this process registers with its
	// pool and budget (tidemark.source_readers) so that every pool reading
	// one source shares its one budget; a process admits no source read
	// until registered and counted. nil: not registered (a reader of your
	// own over a source without tidemark's tables, whose budget no other
	// pool shares).
	SourceDB SourceDB
	// Clock: nil builds a guard against Redis that Run measures and keeps
	// measuring; until its first good measurement every read goes to the
	// source.
	Clock      Clock
	Log        *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not exposed
	// MetricsStage names the metrics, tidemark_<stage>_<noun> (empty: reader),
	// and the tracer.
	MetricsStage string
	// Tracer receives the children of the caller's span (ctx's) for a read's
	// path: cache lookups, lease wait, source read, fill, and an l1 event;
	// nil: no tracing.
	Tracer trace.TracerProvider
}

// Reader answers reads. Build it with New and call Run.
type Reader struct {
	cfg          Config
	cache        Cache
	src          Source
	budget       *budget
	procs        *presence
	source       *sourceReaders // nil without Deps.SourceDB
	l1           *l1
	lookups      *lookups        // the cache lookups of L1 misses, batched when they coincide
	replicas     *replica.Reader // copies of hot keys (docs/design.md, "Hot-key replicas")
	belowMin     *belowMinMemo
	waiters      *keyWaiters
	admit        *admission // which misses of new keys are cached (admission.go)
	m            *metrics
	log          *slog.Logger
	tracer       trace.Tracer
	clock        Clock
	guard        *clockguard.Guard     // the reader's own, when Deps.Clock was nil
	hardLifetime time.Duration         // of values read from the source now
	foreign      atomic.Pointer[error] // set when the namespace is bound to another deployment (identity.go)
	claimed      atomic.Bool           // a claim of the namespace's identity succeeded (identity.go)

	reads     singleflight.Group // per key: one cache resolution (and source read) at a time
	refreshes singleflight.Group // per key: one background refresh at a time

	base   context.Context // parent of background work; cancelled by Close
	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// New builds a Reader; Run counts it in its pool's budget share.
func New(cfg Config, deps Deps) (*Reader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("reader: %w", err)
	}
	var missing []string
	if deps.Source == nil {
		missing = append(missing, "Source")
	}
	if deps.Cache == nil {
		missing = append(missing, "Cache")
	}
	if deps.Redis == nil {
		missing = append(missing, "Redis")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("reader: missing dependencies: %v", missing)
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	stage := deps.MetricsStage
	if stage == "" {
		stage = "reader"
	}
	m, err := newMetrics(reg, stage)
	if err != nil {
		return nil, fmt.Errorf("reader: metrics: %w", err)
	}
	rd := &Reader{
		cfg:          cfg,
		cache:        deps.Cache,
		src:          deps.Source,
		l1:           newL1(cfg.L1TTL, cfg.L1Size),
		belowMin:     newBelowMinMemo(cfg.MinVersionMemo),
		waiters:      &keyWaiters{max: cfg.MaxWaitersPerKey, n: make(map[string]int)},
		admit:        newAdmission(cfg.FillRate),
		m:            m,
		log:          log,
		tracer:       telemetry.Tracer(deps.Tracer, stage),
		clock:        deps.Clock,
		hardLifetime: deps.Cache.Config().HardLifetime,
	}
	if rd.clock == nil {
		if rd.guard, err = clockguard.New(clockguard.DefaultConfig(), clockguard.Deps{Redis: deps.Redis, Log: log, Registerer: reg}); err != nil {
			return nil, fmt.Errorf("reader: %w", err)
		}
		rd.clock = rd.guard
	}
	rd.lookups = newLookups(deps.Cache, rd.clock, cfg.LookupBatch)
	rd.procs = newPresence(cfg.SourcePool, deps.Cache.Config().Namespace, cfg.Instance, deps.Redis, log) // the budget's fallback share counts every process of the pool
	rd.procs.errs, rd.procs.rewinds = m.presenceErrors, m.presenceRewinds
	rd.budget = newBudget(cfg, deps.Redis, rd.procs, m.budgetRejections, m.budgetRate, log)
	rd.procs.settings, rd.procs.agree = rd.budget.own.String(), rd.budget.agree
	if deps.SourceDB != nil {
		rd.source = &sourceReaders{db: deps.SourceDB, pool: cfg.SourcePool, instance: rd.procs.member, settings: rd.budget.own.String(),
			agree: rd.budget.agreeSource, log: log, errs: m.sourceErrors, kick: make(chan struct{}, 1)}
		rd.budget.source, rd.budget.sharesGauge = rd.source, m.sourceShares
		rd.procs.buckets = rd.source.setBuckets
		m.sourceShares.Set(1)
	}
	if rd.replicas, err = replica.NewReader(deps.Cache, cfg.ReplicaManifestTTL, rd.clock.Now, reg); err != nil {
		return nil, fmt.Errorf("reader: %w", err)
	}
	rd.base, rd.cancel = context.WithCancel(context.Background())
	return rd, nil
}

// Run claims the namespace's identity (Claim; refused: it returns the error
// at once), counts this process among its pool's readers every second (the
// budget's share while Redis cannot be asked), sizes fill admission to the
// cache every 10 s, claims the identity again every 5 s, and runs the
// reader's own clock guard when it has one, until ctx ends (nil) or a claim
// is refused (the error); then it stops background work (Close).
func (rd *Reader) Run(ctx context.Context) error {
	defer rd.Close()
	if err := rd.Claim(ctx); errors.Is(err, cache.ErrIdentity) {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); rd.runAdmissionSizing(ctx) }()
	var refused error
	go func() {
		defer wg.Done()
		if refused = rd.runIdentity(ctx); refused != nil {
			stop()
		}
	}()
	if rd.guard != nil {
		_ = rd.guard.Check(ctx) // the outcome is kept in the guard (its Err, the gauge)
		wg.Add(1)
		go func() { defer wg.Done(); _ = rd.guard.Run(ctx) }() // returns nil when ctx ends
	}
	if rd.source != nil {
		wg.Add(1)
		go func() { defer wg.Done(); rd.source.run(ctx) }()
	}
	rd.procs.run(ctx)
	stop()
	wg.Wait()
	return refused
}

// SetInstance names this process in its pool's presence set when
// Config.Instance is empty (see Config.Instance): a server calls it with
// where it listens before Run and before the first read.
func (rd *Reader) SetInstance(instance string) {
	if rd.cfg.Instance == "" && instance != "" {
		rd.procs.name(instance)
		if rd.source != nil {
			rd.source.instance = rd.procs.member
		}
	}
}

// Close stops background refreshes and fills and waits for them. Reads
// after Close still answer, with no background work.
func (rd *Reader) Close() {
	rd.cancel()
	rd.bg.Wait()
}

// Join counts this process among its pool's readers now, instead of at
// Run's first beat, and registers it on the source (Deps.SourceDB).
func (rd *Reader) Join(ctx context.Context) error {
	errs := []error{rd.procs.beat(ctx), rd.procs.beatStatus(ctx)}
	if rd.source != nil {
		errs = append(errs, rd.source.register(ctx))
	}
	return errors.Join(errs...)
}

// SourceErr is nil once this process has been registered on the source and
// counted by the readers of its other pools (always, without
// Deps.SourceDB); until then it admits no source read, and a server is not
// ready. Once nil it stays nil: a later failure holds the budget instead.
func (rd *Reader) SourceErr() error {
	if rd.source == nil {
		return nil
	}
	return rd.source.readyErr()
}

// Share is the number of live readers of the pool this process divides the
// budget's rates by while Redis cannot be asked, and whether it knows it
// (it has been counted, and long enough for the others to count it).
func (rd *Reader) Share(now time.Time) (int64, bool) { return rd.procs.share(now) }

// Config is a Reader's configuration. Validate names the field of each
// problem.
type Config struct {
	// SourcePool names the shared source budget: every reader of one pool
	// shares its rates. The default, promise.SourcePool, is one pool per
	// source: every serve process and every reader of your own against one
	// Postgres share one budget unless told otherwise.
	SourcePool string
	// Mapping names what the source reads, for the namespace's identity
	// record (cache.Identity): catalog.Table.Fingerprint for a table
	// mapping, or a name of your own. Every reader of a namespace must read
	// one mapping; there is no default, since a default would let two
	// tables claim one namespace.
	Mapping string
	// Instance names this process in its pool's presence set. It must be
	// unique among the pool's live processes; a process started under the
	// name of one that died takes over its entry, so the dead one's share
	// of the budget is not held back as a late member's would be. Empty: a
	// random name (every start is then a newcomer).
	Instance string

	RequestTimeout time.Duration // a read's deadline (waiting for another reader's fill ends here with Unavailable)
	SourceTimeout  time.Duration // statement timeout of one source read
	LookupTimeout  time.Duration // bound of one cache Lookup, so a dead Redis is noticed within the request deadline
	// LookupBatch: at most this many cache lookups of reads that coincide
	// (min_version 0) share one pipelined round trip; the lookups that
	// arrive while one is in flight are sent together when it returns (0
	// or 1: each alone)
	LookupBatch int

	// Source budget shared by every reader of the pool (GCRA in Redis), per class.
	ForegroundRate float64       // reads/s for request-path misses
	BackgroundRate float64       // reads/s for stale refreshes
	BudgetBurst    time.Duration // burst tolerance as a time window of the rate
	// ReadYourWritesRate: reads/s for min_version reads, a ceiling inside
	// the total and at most ForegroundRate, so a flood of them cannot take
	// the request path's place (0: a quarter of ForegroundRate)
	ReadYourWritesRate float64
	MaxInFlight        int           // per-process concurrent source reads
	InFlightWait       time.Duration // longest wait for a free in-flight slot

	L1TTL  time.Duration // in-process hot-key cache lifetime (at most 500ms)
	L1Size int           // entries in the L1 (0 disables it)
	// ReplicaManifestTTL: how long a hot key's replica
	// manifest learnt from a lookup is used (at most 500ms, the L1 bound; 0:
	// never, every read goes to the primary)
	ReplicaManifestTTL time.Duration

	MaxWaitersPerKey int // concurrent reads of one key in this process; beyond it Unavailable at once

	MinVersionSlack int64         // how far min_version may be above the source's version before BadMinVersion (else BelowMin)
	MinVersionMemo  time.Duration // how long a source read below min_version answers repeats with BelowMin (0: off)

	// MaxValueBytes: largest value cached; a larger one is
	// answered from the source but not cached (0: no limit)
	MaxValueBytes int64
	// FillRate: fills/s of new keys per process, shared fairly
	// by the tenants filling; a tenant above its share caches only keys it
	// missed twice within the admission window (0: every miss is cached)
	FillRate float64
	// FillTurnover sizes the fill rate to the cache itself: all readers'
	// fills together may refill the whole cache (maxmemory over the mean
	// entry size) no faster than once per FillTurnover, so each process's
	// rate is at most entries / FillTurnover / processes (0: off, FillRate
	// alone; no effect without maxmemory)
	FillTurnover time.Duration
}

// readYourWritesRate is the read-your-writes class's rate in force.
func (c Config) readYourWritesRate() float64 {
	if c.ReadYourWritesRate == 0 {
		return c.ForegroundRate / 4
	}
	return c.ReadYourWritesRate
}

// MaxMinVersionMemo bounds MinVersionMemo: a write through another process
// is answered BelowMin to its own writer's min_version for at most this
// long (read-your-writes, not freshness, is what the memo delays).
const MaxMinVersionMemo = 5 * time.Second

// DefaultConfig returns the production figures: 12,000 + 8,000 source
// reads/s shared by every reader of the pool (read-your-writes 3,000 of
// them at most), 1 s request deadline, 0.5 s L1, one source pool per source
// (promise.SourcePool). Mapping is left to the caller.
func DefaultConfig() Config {
	return Config{
		SourcePool:         promise.SourcePool,
		RequestTimeout:     time.Second,
		SourceTimeout:      time.Second,
		LookupTimeout:      250 * time.Millisecond,
		LookupBatch:        64,
		ForegroundRate:     12000,
		BackgroundRate:     8000,
		BudgetBurst:        100 * time.Millisecond,
		ReadYourWritesRate: 0, // a quarter of ForegroundRate: 3,000
		MaxInFlight:        32,
		InFlightWait:       100 * time.Millisecond,
		L1TTL:              500 * time.Millisecond,
		L1Size:             10000,
		ReplicaManifestTTL: 500 * time.Millisecond,
		MaxWaitersPerKey:   256,
		MinVersionSlack:    1000,
		MinVersionMemo:     time.Second,
		MaxValueBytes:      256 << 10,
		FillRate:           2000,
		FillTurnover:       2 * time.Minute,
	}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if strings.TrimSpace(c.SourcePool) == "" {
		p.Add("SourcePool", "must not be empty")
	}
	if strings.TrimSpace(c.Mapping) == "" {
		p.Add("Mapping", "must name what the source reads (catalog.Table.Fingerprint, or a name of your own): the namespace is bound to it")
	}
	p.Positive("RequestTimeout", c.RequestTimeout)
	p.Positive("SourceTimeout", c.SourceTimeout)
	p.Positive("LookupTimeout", c.LookupTimeout)
	p.Positive("BudgetBurst", c.BudgetBurst)
	p.Positive("InFlightWait", c.InFlightWait)
	rate := func(field string, r float64) {
		if !(r > 0) {
			p.Add(field, "must be a positive rate per second (got %v)", r)
		}
	}
	rate("ForegroundRate", c.ForegroundRate)
	rate("BackgroundRate", c.BackgroundRate)
	switch r := c.ReadYourWritesRate; {
	case !(r >= 0):
		p.Add("ReadYourWritesRate", "must be 0 (a quarter of ForegroundRate) or a positive rate per second (got %v)", r)
	case r > c.ForegroundRate:
		p.Add("ReadYourWritesRate", "must be at most ForegroundRate (%v): read-your-writes reads are metered inside the total beside visitors' misses, and a larger ceiling lets one tenant's min_version flood take their place (got %v)", c.ForegroundRate, r)
	}
	if c.LookupBatch < 0 {
		p.Add("LookupBatch", "must not be negative (got %d)", c.LookupBatch)
	}
	if c.MaxInFlight <= 0 {
		p.Add("MaxInFlight", "must be positive (got %d)", c.MaxInFlight)
	}
	if c.L1TTL < 0 || c.L1TTL > 500*time.Millisecond {
		p.Add("L1TTL", "must be between 0 and 500ms (got %s)", c.L1TTL)
	}
	if c.ReplicaManifestTTL < 0 || c.ReplicaManifestTTL > 500*time.Millisecond {
		p.Add("ReplicaManifestTTL", "must be between 0 and 500ms (got %s)", c.ReplicaManifestTTL)
	}
	if c.L1Size < 0 {
		p.Add("L1Size", "must not be negative (got %d)", c.L1Size)
	}
	if c.MaxWaitersPerKey < 1 {
		p.Add("MaxWaitersPerKey", "must be at least 1 (got %d)", c.MaxWaitersPerKey)
	}
	if c.MinVersionSlack < 1 {
		p.Add("MinVersionSlack", "must be at least 1 (got %d)", c.MinVersionSlack)
	}
	if c.MinVersionMemo < 0 || c.MinVersionMemo > MaxMinVersionMemo {
		p.Add("MinVersionMemo", "must be between 0 and %s (got %s)", MaxMinVersionMemo, c.MinVersionMemo)
	}
	if c.MaxValueBytes < 0 {
		p.Add("MaxValueBytes", "must not be negative (got %d)", c.MaxValueBytes)
	}
	if c.FillRate < 0 {
		p.Add("FillRate", "must not be negative (got %v)", c.FillRate)
	}
	if c.FillTurnover != 0 && c.FillTurnover < time.Second {
		p.Add("FillTurnover", "must be 0 (off) or at least 1s (got %s)", c.FillTurnover)
	}
	return p.Err()
}
