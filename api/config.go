package api

import (
	"strings"
	"tidemark/catalog"
	"time"

	"tidemark/internal/config"
	"tidemark/promise"
	"tidemark/rollout"
)

// Config is the serve stage's configuration. Every field maps to one flag of
// `tidemark serve`; Validate names the field of each problem.
type Config struct {
	Addr      string        // where the API listens
	Namespace string        // Redis namespace, also of the shared source budget unless SourcePool names it
	Table     catalog.Table // the catalog table and how its columns map

	RequestTimeout time.Duration // a GET's deadline (Wait polling ends here with 503)
	SourceTimeout  time.Duration // statement timeout of one source read
	WriteTimeout   time.Duration // deadline of one write transaction
	LookupTimeout  time.Duration // bound of one cache Lookup, so a dead Redis is noticed within the request deadline

	// Source budget shared by every serve process (GCRA in Redis), per class.
	ForegroundRate float64       // reads/s for request-path misses
	BackgroundRate float64       // reads/s for stale refreshes
	BudgetBurst    time.Duration // burst tolerance as a time window of the rate
	// ReadYourWritesRate: reads/s for min_version reads
	ReadYourWritesRate float64
	MaxInFlight        int           // per-process concurrent source reads
	InFlightWait       time.Duration // longest wait for a free in-flight slot

	L1TTL  time.Duration // in-process hot-key cache lifetime (at most 500ms)
	L1Size int           // entries in the L1 (0 disables it)
	// ReplicaManifestTTL: how long a hot key's replica
	// manifest learnt from a lookup is used (at most 500ms, the L1 bound; 0:
	// never, every read goes to the primary)
	ReplicaManifestTTL time.Duration

	IdempotencyRetention time.Duration // how long an Idempotency-Key's answer is kept
	MaxWaitersPerKey     int           // concurrent GETs of one key in this process; beyond it 503 at once

	MinVersionSlack int64         // how far min_version may be above the key's known floor
	MinVersionMemo  time.Duration // how long a source read below min_version answers repeats with 412 (0: off)

	// MaxValueBytes: largest value cached; a larger one is
	// answered from the source but not cached (0: no limit)
	MaxValueBytes int64
	// FillRate: fills/s of new keys per process, shared fairly
	// by the tenants filling; a tenant above its share caches only keys it
	// missed twice within the admission window (0: every miss is cached)
	FillRate float64
	// FillTurnover sizes the fill rate to the cache itself: all serve
	// processes' fills together may refill the whole cache (maxmemory over
	// the mean entry size) no faster than once per FillTurnover, so each
	// process's rate is at most entries / FillTurnover / processes (0: off,
	// FillRate alone; no effect without maxmemory)
	FillTurnover time.Duration

	// SourcePool names the source budget and the rollout store, shared by
	// every namespace of one deployment so that a namespace upgrade runs on
	// one budget (empty: Namespace)
	SourcePool string
	// RolloutDefault is the serving mode of tenants without a rollout
	// setting: cache (100 %), shadow or source
	RolloutDefault   string
	RolloutPoll      time.Duration // how often the rollout settings are read (a change is in force within it)
	ShadowSample     float64       // share of shadowed source reads compared with the cache
	ShadowGrace      time.Duration // an older cached version still served after this is cache_older_than_allowed
	HaltMismatchRate float64       // shadow mismatch share of a ramp step that halts it
	HaltMinChecks    int           // comparisons of a step before its mismatch rate is judged

	MaxBodyBytes int64         // largest accepted request body
	AuthTTL      time.Duration // how long a resolved API key is trusted before re-checking Postgres
	AuthStale    time.Duration // how long a known key keeps working while Postgres cannot be asked
}

// MaxMinVersionMemo bounds MinVersionMemo: a write through another serve
// process is answered 412 to its own writer's min_version for at most this
// long (read-your-writes, not freshness, is what the memo delays).
const MaxMinVersionMemo = 5 * time.Second

// DefaultConfig returns the production figures: 12,000 + 8,000 source
// reads/s shared by every serve process, 1 s request deadline, 0.5 s L1.
func DefaultConfig() Config {
	return Config{
		Addr:                 "127.0.0.1:8080",
		Namespace:            promise.Namespace,
		Table:                catalog.DefaultTable(),
		RequestTimeout:       time.Second,
		SourceTimeout:        time.Second,
		WriteTimeout:         5 * time.Second,
		LookupTimeout:        250 * time.Millisecond,
		ForegroundRate:       12000,
		BackgroundRate:       8000,
		BudgetBurst:          100 * time.Millisecond,
		ReadYourWritesRate:   3000,
		MaxInFlight:          32,
		InFlightWait:         100 * time.Millisecond,
		L1TTL:                500 * time.Millisecond,
		L1Size:               10000,
		ReplicaManifestTTL:   500 * time.Millisecond,
		IdempotencyRetention: 24 * time.Hour,
		MaxWaitersPerKey:     256,
		MinVersionSlack:      1000,
		MinVersionMemo:       time.Second,
		RolloutDefault:       "cache",
		RolloutPoll:          time.Second,
		ShadowSample:         0.05,
		ShadowGrace:          5 * time.Second,
		HaltMismatchRate:     0.01,
		HaltMinChecks:        100,
		MaxBodyBytes:         64 << 10,
		MaxValueBytes:        256 << 10,
		FillRate:             2000,
		FillTurnover:         2 * time.Minute,
		AuthTTL:              30 * time.Second,
		AuthStale:            10 * time.Minute,
	}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	p.Nested("Table", c.Table.Validate())
	if strings.TrimSpace(c.Addr) == "" {
		p.Add("Addr", "must not be empty")
	}
	if strings.TrimSpace(c.Namespace) == "" {
		p.Add("Namespace", "must not be empty")
	}
	p.Positive("RequestTimeout", c.RequestTimeout)
	p.Positive("SourceTimeout", c.SourceTimeout)
	p.Positive("WriteTimeout", c.WriteTimeout)
	p.Positive("LookupTimeout", c.LookupTimeout)
	p.Positive("BudgetBurst", c.BudgetBurst)
	p.Positive("InFlightWait", c.InFlightWait)
	p.Positive("AuthTTL", c.AuthTTL)
	if c.AuthStale < 0 {
		p.Add("AuthStale", "must not be negative (got %s)", c.AuthStale)
	}
	rate := func(field string, r float64) {
		if !(r > 0) {
			p.Add(field, "must be a positive rate per second (got %v)", r)
		}
	}
	rate("ForegroundRate", c.ForegroundRate)
	rate("BackgroundRate", c.BackgroundRate)
	rate("ReadYourWritesRate", c.ReadYourWritesRate)
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
	p.Positive("IdempotencyRetention", c.IdempotencyRetention)
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
	if c.RolloutDefault != "" {
		if _, err := rollout.ParseMode(c.RolloutDefault); err != nil {
			p.Add("RolloutDefault", "must be cache, shadow or source (got %q)", c.RolloutDefault)
		}
	}
	p.Positive("RolloutPoll", c.RolloutPoll)
	p.Positive("ShadowGrace", c.ShadowGrace)
	if !(c.ShadowSample >= 0 && c.ShadowSample <= 1) {
		p.Add("ShadowSample", "must be between 0 and 1 (got %v)", c.ShadowSample)
	}
	if !(c.HaltMismatchRate > 0 && c.HaltMismatchRate <= 1) {
		p.Add("HaltMismatchRate", "must be above 0 and at most 1 (got %v)", c.HaltMismatchRate)
	}
	if c.HaltMinChecks < 1 {
		p.Add("HaltMinChecks", "must be at least 1 (got %d)", c.HaltMinChecks)
	}
	if c.MaxBodyBytes <= 0 {
		p.Add("MaxBodyBytes", "must be positive (got %d)", c.MaxBodyBytes)
	}
	return p.Err()
}

// sourcePool names the budget and the rollout store.
func (c Config) sourcePool() string {
	if c.SourcePool != "" {
		return c.SourcePool
	}
	return c.Namespace
}
