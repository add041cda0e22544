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

	"github.com/redis/go-redis/v9"
)

// Budget classes: request-path misses and background refreshes.
const (
	classForeground = "foreground"
	classBackground = "background"
)

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
// cluster-wide GCRA rate of the class in Redis. When Redis cannot be asked the
// process falls back to a local GCRA, so a Redis outage never means unbounded
// reads of Postgres.
type budget struct {
	rdb       redis.Scripter
	script    *redis.Script
	classes   map[string]*classBudget
	fallback  *localGCRA
	inflight  chan struct{}
	wait      time.Duration
	log       *slog.Logger
	lastWarn  atomic.Int64 // unix nanos of the last "Redis unavailable" warning
	redisWait time.Duration
}

type classBudget struct {
	key       string
	interval  int64 // microseconds
	tolerance int64 // microseconds
}

func newBudget(cfg Config, rdb redis.Scripter, log *slog.Logger) *budget {
	mk := func(class string, rate float64) *classBudget {
		interval := int64(math.Max(1, 1e6/rate))
		return &classBudget{
			key:       cfg.Namespace + ":v1:_budget:" + class,
			interval:  interval,
			tolerance: int64(math.Max(float64(interval), float64(cfg.BudgetBurst.Microseconds()))),
		}
	}
	fbInterval := time.Duration(float64(time.Second) / cfg.FallbackRate)
	return &budget{
		rdb:    rdb,
		script: redis.NewScript(budgetLua),
		classes: map[string]*classBudget{
			classForeground: mk(classForeground, cfg.ForegroundRate),
			classBackground: mk(classBackground, cfg.BackgroundRate),
		},
		fallback:  &localGCRA{interval: fbInterval, tolerance: max(fbInterval, cfg.BudgetBurst)},
		inflight:  make(chan struct{}, cfg.MaxInFlight),
		wait:      cfg.InFlightWait,
		log:       log,
		redisWait: cfg.LookupTimeout,
	}
}

// acquire admits one source read of class or returns a *budgetError. The
// caller must call release when the read is done.
func (b *budget) acquire(ctx context.Context, class string) (release func(), err error) {
	// The slot first: a rate token is only spent on a read that will happen.
	select {
	case b.inflight <- struct{}{}:
	default:
		t := time.NewTimer(b.wait)
		defer t.Stop()
		select {
		case b.inflight <- struct{}{}:
		case <-t.C:
			return nil, &budgetError{Class: class, Why: "inflight", RetryAfter: time.Second}
		case <-ctx.Done():
			return nil, &budgetError{Class: class, Why: "inflight", RetryAfter: time.Second}
		}
	}
	release = func() { <-b.inflight }
	ok, retry, err := b.rate(ctx, class)
	if err != nil {
		release()
		return nil, err
	}
	if !ok {
		release()
		return nil, &budgetError{Class: class, Why: "rate", RetryAfter: retry}
	}
	return release, nil
}

func (b *budget) rate(ctx context.Context, class string) (bool, time.Duration, error) {
	cb := b.classes[class]
	rctx, cancel := context.WithTimeout(ctx, b.redisWait)
	defer cancel()
	res, err := b.script.Run(rctx, b.rdb, []string{cb.key}, cb.interval, cb.tolerance).Int64Slice()
	if err == nil && len(res) == 2 {
		return res[0] == 1, time.Duration(res[1]) * time.Microsecond, nil
	}
	if ctx.Err() != nil {
		return false, 0, fmt.Errorf("api: source budget: %w", ctx.Err())
	}
	// Redis is unreachable or broken: bounded local admission instead.
	now := time.Now()
	if last := b.lastWarn.Load(); now.UnixNano()-last > int64(10*time.Second) && b.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		b.log.Warn("shared source budget unavailable; using the per-process fallback rate", "err", err)
	}
	ok, retry := b.fallback.allow(now)
	return ok, retry, nil
}

// localGCRA is the in-process rate limiter used while Redis is unavailable.
type localGCRA struct {
	mu        sync.Mutex
	tat       time.Time
	interval  time.Duration
	tolerance time.Duration
}

func (l *localGCRA) allow(now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	newTat := tat.Add(l.interval)
	if allowAt := newTat.Add(-l.tolerance); allowAt.After(now) {
		return false, allowAt.Sub(now)
	}
	l.tat = newTat
	return true, 0
}
