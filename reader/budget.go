package reader

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
	ClassForeground     = "foreground"
	ClassBackground     = "background"
	ClassReadYourWrites = "read_your_writes"
)

// tenantWindow is how recently a tenant must have asked for a class to count
// as active in it (and so to shrink the others' fair share).
const tenantWindow = time.Second

// budgetRetries is how many times an ask of the shared budget that failed
// is asked again while this process still reaches Redis (presence.reachable).
const budgetRetries = 2

//go:embed budget.lua
var budgetLua string

// ErrBudget is matched (errors.Is) by every refusal of the source budget.
var ErrBudget = errors.New("reader: source budget exhausted")

// BudgetError is a refused source read: the rate budget of its class is spent,
// or the process's in-flight cap is full. RetryAfter says when to come back.
type BudgetError struct {
	Class      string
	Why        string // "rate" or "inflight"
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("reader: source budget exhausted (%s, %s): retry after %s", e.Class, e.Why, e.RetryAfter)
}
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// budget admits source reads: a per-process in-flight cap, then the
// cluster-wide GCRA in Redis: the total (foreground + background, what the
// source is promised), the class inside it, and a fair share per tenant
// inside the class and where the total is spent (a tenant reading faster
// than its share of the total may spend only its share of the total's
// burst; budget.lua). Background reads leave the last part of the total's
// burst to the request path (they back off first). When Redis cannot be
// asked the process falls back to local buckets at its share of the same
// rates (rate / live serve processes), the total included, for as long as
// the processes still on Redis reserve that share (presence.go), so neither
// an outage nor one process cut off from Redis means more reads of Postgres
// than the total allows.
type budget struct {
	rdb       redis.Scripter
	script    *redis.Script
	classes   map[string]*classBudget
	total     bucketRate
	totalKey  string
	procs     *presence
	wait      time.Duration
	log       *slog.Logger
	lastWarn  atomic.Int64 // unix nanos of the last "Redis unavailable" warning
	redisWait time.Duration
	refused   *prometheus.CounterVec // by class: every refusal, wherever it is asked from
	// fgRefused counts the foreground class's refusals for the warmer's
	// back-off (Reader.ForegroundRefusals), beside the metric.
	fgRefused atomic.Int64

	// The local fallback: one bucket per class and one for the total,
	// spent together under mu.
	mu        sync.Mutex
	localTAT  map[string]time.Time
	totalTAT  time.Time
	localUsed bool // the fallback has admitted since Redis last answered
}

// bucketRate is one GCRA bucket's emission interval and burst tolerance.
type bucketRate struct {
	interval  int64 // microseconds
	tolerance int64 // microseconds
}

// capacity is the most reads a full bucket admits at once.
func (r bucketRate) capacity() int { return max(1, int(r.tolerance/r.interval)) }

type classBudget struct {
	name    string
	prefix  string // under the budget's hash tag: every key of the budget is in one Cluster slot
	rate    bucketRate
	reserve int64 // microseconds of the total's tolerance this class leaves to the others
	// inflight is this process's cap on concurrent reads of the class.
	inflight chan struct{}
}

func newBudget(cfg Config, rdb redis.Scripter, procs *presence, refused *prometheus.CounterVec, log *slog.Logger) *budget {
	// Visitors' misses and refreshes share the process's in-flight slots;
	// read-your-writes reads have their own quarter, so a flood of them cannot
	// hold every slot.
	shared := make(chan struct{}, cfg.MaxInFlight)
	tag := budgetTag(cfg.SourcePool) // one pool across the namespaces of an upgrade
	mkRate := func(rate float64) bucketRate {
		interval := int64(math.Max(1, 1e6/rate))
		return bucketRate{interval: interval, tolerance: int64(math.Max(float64(interval), float64(cfg.BudgetBurst.Microseconds())))}
	}
	total := mkRate(cfg.ForegroundRate + cfg.BackgroundRate)
	mk := func(class string, rate float64, inflight chan struct{}) *classBudget {
		return &classBudget{name: class, prefix: tag + ":" + class, rate: mkRate(rate), inflight: inflight}
	}
	bg := mk(ClassBackground, cfg.BackgroundRate, shared)
	// Background reads may not take the last half of the total's burst:
	// when the request path needs the source, background work waits first.
	bg.reserve = total.tolerance / 2
	return &budget{
		rdb:    rdb,
		script: redis.NewScript(budgetLua),
		classes: map[string]*classBudget{
			ClassForeground:     mk(ClassForeground, cfg.ForegroundRate, shared),
			ClassBackground:     bg,
			ClassReadYourWrites: mk(ClassReadYourWrites, cfg.readYourWritesRate(), make(chan struct{}, max(1, cfg.MaxInFlight/4))),
		},
		total:     total,
		totalKey:  tag + ":total",
		procs:     procs,
		wait:      cfg.InFlightWait,
		log:       log,
		redisWait: cfg.LookupTimeout,
		refused:   refused,
		localTAT:  map[string]time.Time{},
	}
}

// maxCost is the most reads of class one admission may ask for: what its
// full buckets (the class, and the total less the class's reserve) hold.
func (b *budget) maxCost(class string) int {
	cb := b.classes[class]
	return max(1, min(cb.rate.capacity(), int((b.total.tolerance-cb.reserve)/b.total.interval)))
}

// acquire admits one source read of class for tenant or returns a
// *BudgetError (counted). The caller must call release when the read is done.
func (b *budget) acquire(ctx context.Context, class, tenant string) (release func(), err error) {
	return b.acquireN(ctx, class, tenant, 1)
}

// acquireN admits cost reads at once (at most maxCost(class)).
func (b *budget) acquireN(ctx context.Context, class, tenant string, cost int) (release func(), err error) {
	release, err = b.admit(ctx, class, tenant, cost)
	if errors.Is(err, ErrBudget) {
		b.refused.WithLabelValues(class).Inc()
		if class == ClassForeground {
			b.fgRefused.Add(1)
		}
	}
	return release, err
}

// acquireWait is acquireN for background callers, which wait rather than
// fail: while the budget refuses it sleeps the refusal's RetryAfter and asks
// again, until it admits or ctx ends (ctx's error). Any other error returns
// at once.
func (b *budget) acquireWait(ctx context.Context, class, tenant string, cost int) (release func(), err error) {
	for {
		release, err := b.acquireN(ctx, class, tenant, cost)
		var be *BudgetError
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

func (b *budget) admit(ctx context.Context, class, tenant string, cost int) (release func(), err error) {
	cb := b.classes[class]
	// The rate first: a refused read never holds an in-flight slot, so a
	// tenant flooding past its share cannot crowd the slots either. (A token
	// whose read then finds no free slot is lost; that only errs low.)
	ok, retry, err := b.rate(ctx, cb, tenant, cost)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &BudgetError{Class: class, Why: "rate", RetryAfter: retry}
	}
	select {
	case cb.inflight <- struct{}{}:
	default:
		t := time.NewTimer(b.wait)
		defer t.Stop()
		select {
		case cb.inflight <- struct{}{}:
		case <-t.C:
			return nil, &BudgetError{Class: class, Why: "inflight", RetryAfter: time.Second}
		case <-ctx.Done():
			return nil, &BudgetError{Class: class, Why: "inflight", RetryAfter: time.Second}
		}
	}
	return func() { <-cb.inflight }, nil
}

func (b *budget) rate(ctx context.Context, cb *classBudget, tenant string, cost int) (bool, time.Duration, error) {
	keys := []string{cb.prefix, cb.prefix + ":t:" + tenant, cb.prefix + ":tenants", b.totalKey, cb.prefix + ":t:" + tenant + ":n",
		b.procs.procsKey, b.procs.countKey, b.totalKey + ":t:" + tenant, b.totalKey + ":tenants"}
	isTenant := 1
	if tenant == auditTenant {
		isTenant = 0
	}
	var res []int64
	var err error
	// A slow Redis is not a lost one: while this process's beats land, an
	// ask that timed out is asked again within the request's deadline
	// instead of holding (a loaded host's Redis calls outlast the lookup
	// timeout now and then). An ask that ran after all spent a read the
	// retry does not use: that errs low.
	for try := 0; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, b.redisWait)
		res, err = b.script.Run(rctx, b.rdb, keys, cb.rate.interval, cb.rate.tolerance, tenant, tenantWindow.Microseconds(), cost,
			b.total.interval, b.total.tolerance, cb.reserve, b.procs.late.Milliseconds(), b.procs.ttl.Milliseconds(), b.procs.member, isTenant).Int64Slice()
		cancel()
		if err == nil || ctx.Err() != nil || try == budgetRetries || !b.procs.reachable(time.Now()) {
			break
		}
	}
	if err == nil && len(res) == 2 {
		b.mu.Lock()
		b.localUsed = false
		b.mu.Unlock()
		return res[0] == 1, time.Duration(res[1]) * time.Microsecond, nil
	}
	if ctx.Err() != nil {
		return false, 0, fmt.Errorf("reader: source budget: %w", ctx.Err())
	}
	// Redis is unreachable or broken: bounded local admission instead, at
	// this process's share of the rates, and only while the processes still
	// on Redis reserve that share (presence.localWindow). Before, a share it
	// took could be one another process already has; after, one the others
	// no longer leave it. It holds then.
	now := time.Now()
	n, _ := b.procs.share(now)
	ok, retry, why := b.procs.localWindow(now)
	if last := b.lastWarn.Load(); now.UnixNano()-last > int64(10*time.Second) && b.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		if ok {
			b.log.Warn("shared source budget unavailable; using this process's share of the rate", "err", err, "serve_processes", n)
		} else {
			b.log.Warn("shared source budget unavailable; holding source reads", "err", err, "serve_processes", n, "why", why)
		}
	}
	if !ok {
		return false, retry, nil
	}
	ok, retry = b.local(now, cb, n, cost)
	return ok, retry, nil
}

// local is the fallback GCRA: the class's and the total's rates divided by
// the n live serve processes, with the same burst window, so the processes
// together never exceed the shared rates (nor their bursts). Its state
// starts empty each time Redis stops answering: what was spent through Redis
// just before is not known here, so no fresh burst is handed out on top.
func (b *budget) local(now time.Time, cb *classBudget, n int64, cost int) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	share := func(r bucketRate) (iv, tol time.Duration) {
		iv = time.Duration(r.interval*n) * time.Microsecond
		return iv, max(iv, time.Duration(r.tolerance)*time.Microsecond)
	}
	civ, ctol := share(cb.rate)
	tiv, ttol := share(b.total)
	if !b.localUsed {
		b.localUsed = true
		for c, other := range b.classes {
			oiv, otol := share(other.rate)
			b.localTAT[c] = now.Add(otol - oiv)
		}
		b.totalTAT = now.Add(ttol - tiv)
	}
	next := func(tat time.Time, iv, tol time.Duration) (time.Time, time.Duration) {
		if tat.Before(now) {
			tat = now
		}
		newTat := tat.Add(iv * time.Duration(cost))
		if allowAt := newTat.Add(-tol); allowAt.After(now) {
			return time.Time{}, allowAt.Sub(now)
		}
		return newTat, 0
	}
	classTat, wait := next(b.localTAT[cb.name], civ, ctol)
	if classTat.IsZero() {
		return false, wait
	}
	reserve := time.Duration(cb.reserve) * time.Microsecond
	totalTat, wait := next(b.totalTAT, tiv, ttol-reserve)
	if totalTat.IsZero() {
		return false, wait
	}
	b.localTAT[cb.name], b.totalTAT = classTat, totalTat
	return true, 0
}
