// Package hotset knows which keys are hot. Every serve process counts the
// keys it looks up in a fixed-size heavy-hitters sketch per tenant (bounded
// memory whatever the key space, so a scan of random ids cannot grow it) and
// merges the counts every few seconds into one bounded, decayed Redis sorted
// set per namespace. The warmer fills the cache from that set after the cache
// tier loses data, and `tidemark inspect --hot` prints it.
package hotset

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

//go:embed merge.lua
var mergeLua string

var mergeScript = redis.NewScript(mergeLua)

// Config sizes the sketch and the shared set.
type Config struct {
	Namespace     string        // cache namespace: names the sorted set
	PerTenant     int           // counters per tenant
	MaxTenants    int           // tenants tracked at once; the least read gives way
	TimeConstant  time.Duration // decay time constant: a read's weight is exp(-age/TimeConstant)
	MergeInterval time.Duration // how often counts go to Redis
	MaxKeys       int           // members kept in the shared set
	// The fast estimate (fast.go): time constant, how often each process
	// publishes, and how many of its fastest keys.
	FastTimeConstant time.Duration
	FastInterval     time.Duration
	FastKeys         int
}

// DefaultConfig keeps 1024 keys for each of 64 tenants (about 100 KiB),
// forgets with a 10-minute time constant and merges every 5 s into a set of
// at most 50,000 keys; the fast estimate has a 2 s time constant and each
// process publishes its 32 fastest keys every second.
func DefaultConfig() Config {
	return Config{Namespace: promise.Namespace, PerTenant: 1024, MaxTenants: 64, TimeConstant: 10 * time.Minute,
		MergeInterval: 5 * time.Second, MaxKeys: 50_000,
		FastTimeConstant: 2 * time.Second, FastInterval: time.Second, FastKeys: 32}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Namespace == "" {
		p.Add("Namespace", "must not be empty")
	}
	for _, f := range []struct {
		field string
		n     int
	}{{"PerTenant", c.PerTenant}, {"MaxTenants", c.MaxTenants}, {"MaxKeys", c.MaxKeys}, {"FastKeys", c.FastKeys}} {
		if f.n < 1 {
			p.Add(f.field, "must be at least 1 (got %d)", f.n)
		}
	}
	if c.TimeConstant < time.Second {
		p.Add("TimeConstant", "must be at least 1s (got %s)", c.TimeConstant)
	}
	if c.MergeInterval < 10*time.Millisecond {
		p.Add("MergeInterval", "must be at least 10ms (got %s)", c.MergeInterval)
	}
	if c.FastInterval < 10*time.Millisecond {
		p.Add("FastInterval", "must be at least 10ms (got %s)", c.FastInterval)
	}
	if c.FastTimeConstant < c.FastInterval {
		p.Add("FastTimeConstant", "must be at least FastInterval (got %s < %s)", c.FastTimeConstant, c.FastInterval)
	}
	return p.Err()
}

// Key is the namespace's hot-set sorted set; members are schema.Key(tenant,
// item). EpochKey holds its decay landmark and time constant. The shared hash
// tag keeps both on one Cluster slot.
func Key(ns string) string      { return ns + ":v1:_hot:{hot}" }
func EpochKey(ns string) string { return ns + ":v1:_hot:{hot}:epoch" }

// Tracker counts reads and merges them into Redis. Observe is safe for
// concurrent use.
type Tracker struct {
	cfg Config
	rdb redis.UniversalClient
	log *slog.Logger
	m   *metrics

	now       func() time.Time
	id        string   // names this process's entries in the fast hot set
	published []string // keys of its entries there, replaced by the next publish

	mu        sync.Mutex
	tenants   map[string]*spaceSaving
	lastDecay time.Time
	lastFast  time.Time
}

// Deps are the Tracker's dependencies; Log and Registerer may be nil
// (docs/design.md, Lifecycle).
type Deps struct {
	Redis      redis.UniversalClient // required
	Log        *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time // the fast estimate's clock; nil: time.Now
}

// New checks cfg and builds a Tracker.
func New(cfg Config, d Deps) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rdb, log, reg := d.Redis, d.Log, d.Registerer
	if rdb == nil {
		return nil, errors.New("hotset: nil redis client")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("hotset: metrics: %w", err)
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("hotset: process id: %w", err)
	}
	return &Tracker{cfg: cfg, rdb: rdb, log: log.With("component", "hotset"), m: m, now: now, id: hex.EncodeToString(id[:]),
		tenants: map[string]*spaceSaving{}, lastDecay: time.Now(), lastFast: now()}, nil
}

// Observe counts one read of (tenant, item).
func (t *Tracker) Observe(tenant, item string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.tenants[tenant]
	if !ok {
		if len(t.tenants) >= t.cfg.MaxTenants {
			t.dropQuietestLocked()
		}
		s = newSpaceSaving(t.cfg.PerTenant)
		t.tenants[tenant] = s
	}
	s.observe(item)
}

// dropQuietestLocked forgets the tenant with the fewest decayed reads.
func (t *Tracker) dropQuietestLocked() {
	var (
		victim string
		least  = math.Inf(1)
	)
	for name, s := range t.tenants {
		if s.total < least {
			victim, least = name, s.total
		}
	}
	delete(t.tenants, victim)
	t.m.tenantsDropped.Inc()
}

// Top is this process's view: the n hottest keys of tenant ("" for all),
// by decayed count.
func (t *Tracker) Top(tenant string, n int) []Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Entry
	for name, s := range t.tenants {
		if tenant == "" || tenant == name {
			out = append(out, s.top(name, n)...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Run merges every MergeInterval until ctx ends, and once more on the way
// out so a stopping process hands over what it counted.
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.MergeInterval)
	defer tick.Stop()
	fast := time.NewTicker(t.cfg.FastInterval)
	defer fast.Stop()
	failing, fastFailing := false, false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = t.Merge(fctx)
			cancel()
			return nil
		case <-fast.C:
			err := t.PublishFast(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return nil
			case err != nil && !fastFailing:
				t.log.Warn("hot-set fast publish failed; hot-key replicas see this process's reads again once it succeeds", "err", err)
				fastFailing = true
			case err == nil && fastFailing:
				t.log.Info("hot-set fast publish recovered")
				fastFailing = false
			}
			continue
		case <-tick.C:
		}
		err := t.Merge(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			t.log.Warn("hot-set merge failed; counts of this interval are dropped", "err", err)
			failing = true
		case err == nil && failing:
			t.log.Info("hot-set merge recovered")
			failing = false
		}
	}
}

// mergeChunk bounds one script call (ARGV pairs), so a merge never blocks
// Redis for long.
const mergeChunk = 500

// Merge sends the reads counted since the last merge to the shared set and
// decays the local counts. A failed merge loses only that interval's counts.
func (t *Tracker) Merge(ctx context.Context) error {
	// A lost cache node may have held the shared set: then every process
	// re-seeds it with its whole sketch, not just the last interval.
	exists, err := t.rdb.Exists(ctx, EpochKey(t.cfg.Namespace)).Result()
	if err != nil {
		t.m.merges.WithLabelValues("error").Inc()
		return fmt.Errorf("hotset: merge: %w", err)
	}
	reseed := exists == 0
	var args []any
	t.mu.Lock()
	now := time.Now()
	f := decayFactor(now.Sub(t.lastDecay).Seconds(), t.cfg.TimeConstant.Seconds())
	t.lastDecay = now
	tracked := 0
	for tenant, s := range t.tenants {
		if reseed {
			s.takeAll(func(item string, n float64) { args = append(args, schema.Key(tenant, item), n) })
		} else {
			s.takePending(func(item string, n float64) { args = append(args, schema.Key(tenant, item), n) })
		}
		s.decay(f)
		tracked += len(s.h)
	}
	t.mu.Unlock()
	t.m.trackedKeys.Set(float64(tracked))
	for lo := 0; lo < len(args); lo += 2 * mergeChunk {
		chunk := args[lo:min(len(args), lo+2*mergeChunk)]
		argv := append([]any{t.cfg.TimeConstant.Milliseconds(), t.cfg.MaxKeys}, chunk...)
		n, err := mergeScript.Run(ctx, t.rdb, []string{Key(t.cfg.Namespace), EpochKey(t.cfg.Namespace)}, argv...).Int64()
		if err != nil {
			t.m.merges.WithLabelValues("error").Inc()
			return fmt.Errorf("hotset: merge %d keys: %w", len(chunk)/2, err)
		}
		t.m.sharedKeys.Set(float64(n))
	}
	t.m.merges.WithLabelValues("ok").Inc()
	return nil
}
