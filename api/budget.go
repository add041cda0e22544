package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Budget classes: visitors' request-path misses, background refreshes, and
// read-your-writes reads (min_version), metered apart so that one cannot
// spend another's budget.
const (
	classForeground     = "foreground"
	classBackground     = "background"
	classReadYourWrites = "read_your_writes"
)

// tenantWindow is how recently a tenant must have asked for a class to count
// as active in it (and so to shrink the others' fair share).
const tenantWindow = time.Second

//go:embed budget.lua
var budgetLua string

// errBudget is matched (errors.Is) by every refusal of the source budget.
var errBudget = errors.New("api: source budget exhausted")

// budgetError is a refused source read: the rate budget of its class is spent,
// or the process's in-flight cap is full. RetryAfter says when to come back.
type budgetError struct {
	Class      string
	Why        string // "rate" or "inflight"
	RetryAfter time.Duration
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("api: source budget exhausted (%s, %s): retry after %s", e.Class, e.Why, e.RetryAfter)
}
func (e *budgetError) Is(target error) bool { return target == errBudget }

// budget admits source reads: a per-process in-flight cap, then the
// cluster-wide GCRA rate of the class in Redis with a fair share per tenant.
// When Redis cannot be asked the process falls back to a local GCRA at its
// share of the class rate (rate / live serve processes), so a Redis outage
// never means more reads of Postgres than the class allows in total.
type budget struct {
	rdb       redis.Scripter
	script    *redis.Script
	classes   map[string]*classBudget
	procs     *presence
	wait      time.Duration
	log       *slog.Logger
	lastWarn  atomic.Int64 // unix nanos of the last "Redis unavailable" warning
	redisWait time.Duration
	refused   *prometheus.CounterVec // by class: every refusal, wherever it is asked from
}

type classBudget struct {
	prefix    string // hash-tagged: every key of the class is in one Cluster slot
	interval  int64  // microseconds
	tolerance int64  // microseconds
	inflight  chan struct{}
	fallback  localGCRA
}

func newBudget(cfg Config, rdb redis.Scripter, procs *presence, refused *prometheus.CounterVec, log *slog.Logger) *budget {
	// Visitors' misses and refreshes share the process's in-flight slots;
	// read-your-writes reads have their own quarter, so a flood of them cannot
	// hold every slot.
	shared := make(chan struct{}, cfg.MaxInFlight)
	mk := func(class string, rate float64, inflight chan struct{}) *classBudget {
		interval := int64(math.Max(1, 1e6/rate))
		return &classBudget{
			prefix:    "{" + cfg.Namespace + ":v1:_budget:" + class + "}",
			interval:  interval,
			tolerance: int64(math.Max(float64(interval), float64(cfg.BudgetBurst.Microseconds()))),
			inflight:  inflight,
		}
	}
	return &budget{
		rdb:    rdb,
		script: redis.NewScript(budgetLua),
		classes: map[string]*classBudget{
			classForeground:     mk(classForeground, cfg.ForegroundRate, shared),
			classBackground:     mk(classBackground, cfg.BackgroundRate, shared),
			classReadYourWrites: mk(classReadYourWrites, cfg.ReadYourWritesRate, make(chan struct{}, max(1, cfg.MaxInFlight/4))),
		},
		procs:     procs,
		wait:      cfg.InFlightWait,
		log:       log,
		redisWait: cfg.LookupTimeout,
		refused:   refused,
	}
}

// acquire admits one source read of class for tenant or returns a
// *budgetError (counted). The caller must call release when the read is done.
func (b *budget) acquire(ctx context.Context, class, tenant string) (release func(), err error) {
	release, err = b.admit(ctx, class, tenant)
	if errors.Is(err, errBudget) {
		b.refused.WithLabelValues(class).Inc()
	}
	return release, err
}

// acquireWait is acquire for background callers, which wait rather than
// fail: while the budget refuses it sleeps the refusal's RetryAfter and asks
// again, until it admits or ctx ends (ctx's error). Any other error returns
// at once.
func (b *budget) acquireWait(ctx context.Context, class, tenant string) (release func(), err error) {
	for {
		release, err := b.acquire(ctx, class, tenant)
		var be *budgetError
		if !errors.As(err, &be) {
			return release, err
		}
		t := time.NewTimer(max(be.RetryAfter, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (b *budget) admit(ctx context.Context, class, tenant string) (release func(), err error) {
	cb := b.classes[class]
	// The rate first: a refused read never holds an in-flight slot, so a
	// tenant flooding past its share cannot crowd the slots either. (A token
	// whose read then finds no free slot is lost; that only errs low.)
	ok, retry, err := b.rate(ctx, cb, tenant)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &budgetError{Class: class, Why: "rate", RetryAfter: retry}
	}
	select {
	case cb.inflight <- struct{}{}:
	default:
		t := time.NewTimer(b.wait)
		defer t.Stop()
		select {
		case cb.inflight <- struct{}{}:
		case <-t.C:
			return nil, &budgetError{Class: class, Why: "inflight", RetryAfter: time.Second}
		case <-ctx.Done():
			return nil, &budgetError{Class: class, Why: "inflight", RetryAfter: time.Second}
		}
	}
	return func() { <-cb.inflight }, nil
}

func (b *budget) rate(ctx context.Context, cb *classBudget, tenant string) (bool, time.Duration, error) {
	rctx, cancel := context.WithTimeout(ctx, b.redisWait)
	defer cancel()
	keys := []string{cb.prefix, cb.prefix + ":t:" + tenant, cb.prefix + ":tenants"}
	res, err := b.script.Run(rctx, b.rdb, keys, cb.interval, cb.tolerance, tenant, tenantWindow.Microseconds()).Int64Slice()
	if err == nil && len(res) == 2 {
		return res[0] == 1, time.Duration(res[1]) * time.Microsecond, nil
	}
	if ctx.Err() != nil {
		return false, 0, fmt.Errorf("api: source budget: %w", ctx.Err())
	}
	// Redis is unreachable or broken: bounded local admission instead, at
	// this process's share of the class rate.
	now := time.Now()
	n := b.procs.count()
	if last := b.lastWarn.Load(); now.UnixNano()-last > int64(10*time.Second) && b.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		b.log.Warn("shared source budget unavailable; using this process's share of the rate", "err", err, "serve_processes", n)
	}
	interval := time.Duration(cb.interval*n) * time.Microsecond
	ok, retry := cb.fallback.allow(now, interval, max(interval, time.Duration(cb.tolerance)*time.Microsecond/time.Duration(n)))
	return ok, retry, nil
}

// localGCRA is the in-process rate limiter used while Redis is unavailable.
type localGCRA struct {
	mu  sync.Mutex
	tat time.Time
}

func (l *localGCRA) allow(now time.Time, interval, tolerance time.Duration) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	newTat := tat.Add(interval)
	if allowAt := newTat.Add(-tolerance); allowAt.After(now) {
		return false, allowAt.Sub(now)
	}
	l.tat = newTat
	return true, 0
}
