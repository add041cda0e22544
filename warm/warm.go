// Package warm re-warms the cache tier after it loses data. One elected
// warmer per namespace (a Redis lease, so two serve processes never both
// warm) watches for a loss: reset_at moved, the tier's identity changed (a
// master restarted or failed over), or the key count collapsed; and it takes
// requests from `tidemark warm`. It then fills the hottest keys of the shared
// hot set (package hotset) first, through the API's normal lease and fill
// path, charged to the source budget's background class. It starts at a
// fraction of that budget and adds a step every healthy second; it halves
// its rate when source reads slow down or foreground reads are refused.
package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/elect"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
)

// Config of the warmer.
type Config struct {
	Namespace   string
	Top         int           // keys warmed after a detected loss
	MaxRate     float64       // keys/s ceiling: the background budget
	StartRate   float64       // keys/s of the first step
	Step        float64       // keys/s added after each healthy StepEvery
	StepEvery   time.Duration // pacing decisions
	SlowFactor  float64       // back off when a step's mean source read is this many times the run's best
	Workers     int           // concurrent warm reads
	CheckEvery  time.Duration // how often loss triggers and requests are checked
	Collapse    float64       // key count below this share of its recent peak is a loss
	MinPeakKeys int64         // below this many keys no collapse is reported (an empty tier is not a loss)
	HotSetWait  time.Duration // after a loss, how long to wait for the serve processes to re-seed the hot set
	LeaseTTL    time.Duration
}

// DefaultConfig warms the 20,000 hottest keys, starting at 1/8 of an 8,000/s
// background budget and adding 1/8 a second while healthy.
func DefaultConfig() Config {
	return Config{Namespace: promise.Namespace, Top: 20_000, MaxRate: 8000, StartRate: 1000, Step: 1000, StepEvery: time.Second,
		SlowFactor: 3, Workers: 32, CheckEvery: time.Second, Collapse: 0.5, MinPeakKeys: 100,
		HotSetWait: 15 * time.Second, LeaseTTL: 5 * time.Second}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Namespace == "" {
		p.Add("Namespace", "must not be empty")
	}
	if c.Top < 1 {
		p.Add("Top", "must be at least 1 (got %d)", c.Top)
	}
	if c.Workers < 1 {
		p.Add("Workers", "must be at least 1 (got %d)", c.Workers)
	}
	for field, r := range map[string]float64{"MaxRate": c.MaxRate, "StartRate": c.StartRate, "Step": c.Step} {
		if !(r > 0) {
			p.Add(field, "must be a positive rate per second (got %v)", r)
		}
	}
	if c.StartRate > c.MaxRate {
		p.Add("StartRate", "must be at most MaxRate (got %v > %v)", c.StartRate, c.MaxRate)
	}
	if !(c.SlowFactor > 1) {
		p.Add("SlowFactor", "must be above 1 (got %v)", c.SlowFactor)
	}
	if !(c.Collapse > 0 && c.Collapse < 1) {
		p.Add("Collapse", "must be within (0, 1) (got %v)", c.Collapse)
	}
	p.Positive("StepEvery", c.StepEvery)
	p.Positive("CheckEvery", c.CheckEvery)
	p.Positive("LeaseTTL", c.LeaseTTL)
	if c.HotSetWait < 0 {
		p.Add("HotSetWait", "must not be negative (got %s)", c.HotSetWait)
	}
	return p.Err()
}

// Source is the API's background surface (api.Server).
type Source interface {
	Warm(ctx context.Context, tenant, item string) (api.WarmOutcome, error)
	ForegroundRefusals() float64
}

// Deps are the warmer's connections.
type Deps struct {
	Redis      redis.UniversalClient
	Cache      *cache.Client // watermark (reset_at) and server identity
	Source     Source
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// Request is one `tidemark warm` request, queued in Redis.
type Request struct {
	Top    int    `json:"top"`
	Tenant string `json:"tenant,omitempty"`
	At     int64  `json:"at"` // unix ms
}

// Reasons of a warm run (the label of tidemark_warm_runs_total).
const (
	ReasonResetAt   = "reset_at moved"
	ReasonIdentity  = "cache tier identity changed"
	ReasonCollapse  = "key count collapsed"
	ReasonRequested = "requested"
)

// Keys of the warmer's state: the request queue, the progress hash read by
// `tidemark status` and `tidemark warm`, and the lease.
func RequestsKey(ns string) string { return ns + ":v1:_warm:requests" }
func ProgressKey(ns string) string { return ns + ":v1:_warm" }
func leaseKey(ns string) string    { return ns + ":v1:_warm:lease" }

// Enqueue queues a warm request for the elected warmer.
func Enqueue(ctx context.Context, rdb redis.UniversalClient, ns string, r Request) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("warm: request: %w", err)
	}
	if err := rdb.RPush(ctx, RequestsKey(ns), b).Err(); err != nil {
		return fmt.Errorf("warm: queue request: %w", err)
	}
	return nil
}

// Warmer is the warmer; run it in every serve process.
type Warmer struct {
	cfg   Config
	d     Deps
	log   *slog.Logger
	m     *metrics
	lease *elect.Lease
	tier  tier
}

// New checks cfg and deps.
func New(cfg Config, d Deps) (*Warmer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Redis == nil || d.Cache == nil || d.Source == nil {
		return nil, errors.New("warm: Redis, Cache and Source are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	log := d.Log.With("component", "warm")
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("warm: metrics: %w", err)
	}
	lease, err := elect.New(d.Redis, leaseKey(cfg.Namespace), cfg.LeaseTTL, log)
	if err != nil {
		return nil, fmt.Errorf("warm: %w", err)
	}
	return &Warmer{cfg: cfg, d: d, log: log, m: m, lease: lease}, nil
}

// Run observes the cache tier for losses, and warms after one or on a
// request while this process holds the lease.
func (w *Warmer) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() { defer close(done); w.observe(ctx) }()
	defer func() { <-done }()
	return w.lease.Hold(ctx, w.watch)
}
