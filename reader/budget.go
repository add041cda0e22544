package reader

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
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

// budgetRewound is budget.lua's answer when the server lost or rewound the
// pool's presence (rewind.go).
const budgetRewound = 2

//go:embed budget.lua
var budgetLua string

// ErrBudget is matched (errors.Is) by every refusal of the source budget.
var ErrBudget = errors.New("reader: source budget exhausted")

// BudgetError is a refused source read: the rate budget of its class is spent,
// or the process's in-flight cap is full. RetryAfter says when to come back.
type BudgetError struct {
	Class      string
	Why        string // "rate", "inflight", or why the source's pools are not known (sourceReaders.hold)
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
	totalKey  string
	procs     *presence
	wait      time.Duration
	log       *slog.Logger
	lastWarn  warnEvery // "Redis unavailable"
	redisWait time.Duration
	refused   *prometheus.CounterVec // by class: every refusal, wherever it is asked from
	// fgRefused counts the foreground class's refusals for the warmer's
	// back-off (Reader.ForegroundRefusals), beside the metric.
	fgRefused atomic.Int64

	// own is this process's configuration; rates what it admits at: the
	// lowest of each setting among the pool's live serve processes
	// (agree), so one process configured higher (a typo, one Helm
	// release's values) cannot spend the shared buckets at its own pace.
	own     budgetSettings
	rates   atomic.Pointer[budgetRates]
	rateSet *prometheus.GaugeVec // by class and "total": reads/s admitted at (nil in unit tests)
	// What the rates were settled from (settle), under agreeMu: the pool's
	// live processes' settings (presence), the source's live readers'
	// settings and the count of sets of buckets (pool and Redis) they admit
	// from (sourcereaders.go).
	agreeMu        sync.Mutex
	poolSettings   []string
	sourceSettings []string
	sourceShares   int
	sharesGauge    prometheus.Gauge // sourceShares (nil in unit tests)
	unreadable     map[string]bool  // settings that did not parse, warned of once each
	// source holds admissions while this process's view of the source's
	// readers is not sound (nil: not registered on the source, a reader of
	// one's own).
	source *sourceReaders

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
	name   string
	prefix string // under the budget's hash tag: every key of the budget is in one Cluster slot
	// inflight is this process's cap on concurrent reads of the class.
	inflight chan struct{}
}

// budgetSettings are the settings of the budget every serve process of a
// pool must share: the class rates (reads/s) and the burst window.
type budgetSettings struct {
	Foreground, Background, ReadYourWrites float64
	Burst                                  time.Duration
}

func settingsOf(cfg Config) budgetSettings {
	return budgetSettings{Foreground: cfg.ForegroundRate, Background: cfg.BackgroundRate, ReadYourWrites: cfg.readYourWritesRate(), Burst: cfg.BudgetBurst}
}

// String is the settings as a process registers them in its pool
// (presence.go); parseBudgetSettings reads them back.
func (s budgetSettings) String() string {
	return fmt.Sprintf("%g %g %g %d", s.Foreground, s.Background, s.ReadYourWrites, s.Burst.Microseconds())
}

func parseBudgetSettings(v string) (budgetSettings, bool) {
	var s budgetSettings
	var burst int64
	if n, err := fmt.Sscanf(v, "%g %g %g %d", &s.Foreground, &s.Background, &s.ReadYourWrites, &burst); err != nil || n != 4 ||
		!(s.Foreground > 0 && s.Background > 0 && s.ReadYourWrites > 0 && burst > 0) {
		return budgetSettings{}, false
	}
	s.Burst = time.Duration(burst) * time.Microsecond
	return s, true
}

// shared is s with each rate divided into shares.
func (s budgetSettings) shared(shares int) budgetSettings {
	if shares <= 1 {
		return s
	}
	k := float64(shares)
	return budgetSettings{Foreground: s.Foreground / k, Background: s.Background / k, ReadYourWrites: s.ReadYourWrites / k, Burst: s.Burst}
}

// lowest is each setting's lowest of s and o.
func (s budgetSettings) lowest(o budgetSettings) budgetSettings {
	return budgetSettings{Foreground: min(s.Foreground, o.Foreground), Background: min(s.Background, o.Background),
		ReadYourWrites: min(s.ReadYourWrites, o.ReadYourWrites), Burst: min(s.Burst, o.Burst)}
}

// budgetRates are the buckets' rates under one budgetSettings.
type budgetRates struct {
	settings budgetSettings
	classes  map[string]bucketRate
	total    bucketRate
	// reserve is the part of the total's tolerance (microseconds) each
	// class leaves to the others: background reads may not take the last
	// half of the total's burst, so when the request path needs the
	// source, background work waits first.
	reserve map[string]int64
}

func (s budgetSettings) rates() *budgetRates {
	mk := func(rate float64) bucketRate {
		interval := int64(math.Max(1, 1e6/rate))
		return bucketRate{interval: interval, tolerance: int64(math.Max(float64(interval), float64(s.Burst.Microseconds())))}
	}
	total := mk(s.Foreground + s.Background)
	return &budgetRates{settings: s, total: total,
		classes: map[string]bucketRate{ClassForeground: mk(s.Foreground), ClassBackground: mk(s.Background), ClassReadYourWrites: mk(s.ReadYourWrites)},
		reserve: map[string]int64{ClassBackground: total.tolerance / 2}}
}

func newBudget(cfg Config, rdb redis.Scripter, procs *presence, refused *prometheus.CounterVec, rateSet *prometheus.GaugeVec, log *slog.Logger) *budget {
	// Visitors' misses and refreshes share the process's in-flight slots;
	// read-your-writes reads have their own quarter, so a flood of them cannot
	// hold every slot.
	shared := make(chan struct{}, cfg.MaxInFlight)
	tag := budgetTag(cfg.SourcePool) // one pool across the namespaces of an upgrade
	mk := func(class string, inflight chan struct{}) *classBudget {
		return &classBudget{name: class, prefix: tag + ":" + class, inflight: inflight}
	}
	b := &budget{
		rdb:    rdb,
		script: redis.NewScript(budgetLua),
		classes: map[string]*classBudget{
			ClassForeground:     mk(ClassForeground, shared),
			ClassBackground:     mk(ClassBackground, shared),
			ClassReadYourWrites: mk(ClassReadYourWrites, make(chan struct{}, max(1, cfg.MaxInFlight/4))),
		},
		totalKey:  tag + ":total",
		procs:     procs,
		wait:      cfg.InFlightWait,
		log:       log,
		redisWait: cfg.LookupTimeout,
		refused:   refused,
		rateSet:   rateSet,
		own:       settingsOf(cfg),
		localTAT:  map[string]time.Time{},
	}
	b.rates.Store(b.own.rates())
	b.setGauges(b.rates.Load())
	return b
}

// agree takes the budget settings of the pool's live serve processes
// (registered, each as its budgetSettings.String, by their presence
// beats; one that cannot be read is skipped: a process of a build that
// registers none) and settles the rates.
func (b *budget) agree(pool []string) {
	b.agreeMu.Lock()
	defer b.agreeMu.Unlock()
	b.poolSettings = pool
	b.settle()
}

// agreeSource takes the budget settings of the source's live readers, of
// every pool, and how many sets of buckets they admit from
// (sourcereaders.go), and settles the rates.
func (b *budget) agreeSource(settings []string, shares int) {
	b.agreeMu.Lock()
	defer b.agreeMu.Unlock()
	b.sourceSettings, b.sourceShares = settings, max(1, shares)
	if b.sharesGauge != nil {
		b.sharesGauge.Set(float64(b.sourceShares))
	}
	b.settle()
}

// settle sets the rates admitted at: the lowest of each setting among this
// process, the pool's live serve processes and the source's live readers,
// each rate divided by the sets of buckets live on the source (a pool's
// buckets in one Redis: each spends its own). A raise takes effect once no live process is
// configured lower (and a pool that left has gone stale), a cut at once.
// Under agreeMu.
func (b *budget) settle() {
	s, differ := b.own, false
	for _, v := range append(slices.Clone(b.poolSettings), b.sourceSettings...) {
		o, ok := parseBudgetSettings(v)
		if !ok {
			// Not one of ours: its reader's share is still counted (the
			// shares), but its rates cannot be; said once, not at each beat.
			if !b.unreadable[v] {
				if b.unreadable == nil {
					b.unreadable = map[string]bool{}
				}
				b.unreadable[v] = true
				b.log.Warn("a live serve process of this pool or source registered budget settings this process cannot read (another release?); admitting at the lowest of the others, its share still counted",
					"settings", v, "want", "foreground background read_your_writes burst_us")
			}
			continue
		}
		differ = differ || o != b.own
		s = s.lowest(o)
	}
	s = s.shared(b.sourceShares)
	old := b.rates.Load()
	if s == old.settings {
		return
	}
	r := s.rates()
	b.rates.Store(r)
	b.setGauges(r)
	switch {
	case b.sourceShares > 1:
		b.log.Warn("serve processes of several source pools, or of one pool on several Redis deployments, read this source; each admits an even share of the lowest budget (give every deployment on one source one --source-pool and one Redis to share it by demand)",
			"shares", b.sourceShares, "own", b.own.String(), "admitting", s.String(), "settings", "foreground background read_your_writes burst_us")
	case differ:
		b.log.Warn("serve processes of this source are configured with different source budgets; admitting at the lowest of each",
			"own", b.own.String(), "admitting", s.String(), "settings", "foreground background read_your_writes burst_us")
	default:
		b.log.Info("the source's serve processes agree on the source budget again", "admitting", s.String())
	}
}

// setGauges exports the rates admitted at.
func (b *budget) setGauges(r *budgetRates) {
	if b.rateSet == nil {
		return
	}
	s := r.settings
	b.rateSet.WithLabelValues(ClassForeground).Set(s.Foreground)
	b.rateSet.WithLabelValues(ClassBackground).Set(s.Background)
	b.rateSet.WithLabelValues(ClassReadYourWrites).Set(s.ReadYourWrites)
	b.rateSet.WithLabelValues("total").Set(s.Foreground + s.Background)
}

// maxCost is the most reads of class one admission may ask for: what its
// full buckets (the class, and the total less the class's reserve) hold.
func (b *budget) maxCost(class string) int {
	r := b.rates.Load()
	return max(1, min(r.classes[class].capacity(), int((r.total.tolerance-r.reserve[class])/r.total.interval)))
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
	if b.source != nil {
		if why, retry := b.source.hold(time.Now()); why != "" {
			return nil, &BudgetError{Class: class, Why: why, RetryAfter: retry}
		}
	}
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
	r := b.rates.Load()
	cr := r.classes[cb.name]
	var res []int64
	var err error
	// A slow Redis is not a lost one: while this process's beats land, an
	// ask that timed out is asked again within the request's deadline
	// instead of holding (a loaded host's Redis calls outlast the lookup
	// timeout now and then). An ask that ran after all spent a read the
	// retry does not use: that errs low.
	for try := 0; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, b.redisWait)
		res, err = b.script.Run(rctx, b.rdb, keys, cr.interval, cr.tolerance, tenant, tenantWindow.Microseconds(), cost,
			r.total.interval, r.total.tolerance, r.reserve[cb.name], b.procs.late.Milliseconds(), b.procs.ttl.Milliseconds(), b.procs.member, isTenant,
			b.procs.lastRegistered()).Int64Slice()
		if err == nil && len(res) == 2 && res[0] == budgetRewound {
			// Written back, then asked again; still rewound after the
			// retries, it holds (the fallback's window is closed to a
			// process whose beats land).
			err = b.procs.repair(rctx)
		}
		cancel()
		if err == nil || ctx.Err() != nil || try == budgetRetries || !b.procs.reachable(time.Now()) {
			break
		}
	}
	if err == nil && len(res) == 2 && res[0] != budgetRewound {
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
	if b.lastWarn.allow(now) {
		if ok {
			b.log.Warn("shared source budget unavailable; using this process's share of the rate", "err", err, "serve_processes", n)
		} else {
			b.log.Warn("shared source budget unavailable; holding source reads", "err", err, "serve_processes", n, "why", why)
		}
	}
	if !ok {
		return false, retry, nil
	}
	ok, retry = b.local(now, r, cb, n, cost)
	return ok, retry, nil
}

// local is the fallback GCRA: the class's and the total's rates divided by
// the n live serve processes, with the same burst window, so the processes
// together never exceed the shared rates (nor their bursts). Its state
// starts empty each time Redis stops answering: what was spent through Redis
// just before is not known here, so no fresh burst is handed out on top.
func (b *budget) local(now time.Time, r *budgetRates, cb *classBudget, n int64, cost int) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	share := func(br bucketRate) (iv, tol time.Duration) {
		iv = time.Duration(br.interval*n) * time.Microsecond
		return iv, max(iv, time.Duration(br.tolerance)*time.Microsecond)
	}
	civ, ctol := share(r.classes[cb.name])
	tiv, ttol := share(r.total)
	if !b.localUsed {
		b.localUsed = true
		for c, other := range r.classes {
			oiv, otol := share(other)
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
	reserve := time.Duration(r.reserve[cb.name]) * time.Microsecond
	totalTat, wait := next(b.totalTAT, tiv, ttol-reserve)
	if totalTat.IsZero() {
		return false, wait
	}
	b.localTAT[cb.name], b.totalTAT = classTat, totalTat
	return true, 0
}
