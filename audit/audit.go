package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/elect"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/schema"
)

// Violation kinds (the kind label of tidemark_audit_violations_total).
const (
	KindBehindServable = "behind_servable" // behind the source past Grace, not invalidated, still servable
	KindAhead          = "ahead_of_source" // newer than the source row: a rollback or a bug
	KindWrongTenant    = "wrong_tenant"    // a value cached under a tenant that has no such row: it came from elsewhere
	// KindContent: the source's version, another display (a write that did
	// not raise the version, or another table's reader in this namespace).
	KindContent = "content_mismatch"
)

// Deps are the auditor's connections; the caller owns them and runs the
// cache client's watermark poller.
type Deps struct {
	Redis      redis.UniversalClient
	DB         inspect.Querier // the catalog's primary
	Cache      *cache.Client   // watermark and repairs
	Budget     Budget
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// Auditor is the continuous auditor. Run it in every serve process: one of
// them at a time holds the lease and audits.
type Auditor struct {
	cfg   Config
	d     Deps
	log   *slog.Logger
	m     *metrics
	lease *elect.Lease

	contentSQL string // sourceRows' statement (content.go)

	mu      sync.Mutex
	cursors map[string]uint64 // per master address
	window  []round
	sweep   sweepState
}

type round struct {
	at                  time.Time
	checked, violations int
}

// New checks cfg and deps.
func New(cfg Config, d Deps) (*Auditor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Redis == nil || d.DB == nil || d.Cache == nil || d.Budget == nil {
		return nil, errors.New("audit: Redis, DB, Cache and Budget are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	log := d.Log.With("component", "audit")
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("audit: metrics: %w", err)
	}
	lease, err := elect.New(d.Redis, cfg.Namespace+":v1:_audit:lease", cfg.LeaseTTL, log)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return &Auditor{cfg: cfg, d: d, log: log, m: m, lease: lease, cursors: map[string]uint64{}, contentSQL: contentSQL(cfg.Table),
		sweep: sweepState{tenants: map[string]*tenantCount{}}}, nil
}

// Run audits while this process holds the lease, until ctx ends.
func (a *Auditor) Run(ctx context.Context) error {
	return a.lease.Hold(ctx, func(ctx context.Context) error {
		a.m.leader.Set(1)
		defer a.m.leader.Set(0)
		every := time.Duration(float64(a.cfg.Batch) / a.cfg.Rate * float64(time.Second))
		t := time.NewTicker(every)
		defer t.Stop()
		failing := false
		for {
			err := a.Round(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil && !failing:
				a.log.Warn("audit round failed; retrying", "err", err)
				failing = true
			case err == nil && failing:
				a.log.Info("audit recovered")
				failing = false
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
}

// Round audits the next page of entries of every master, up to Batch in
// all: SCAN continues where the last round stopped, so a full sweep visits
// every entry once.
func (a *Auditor) Round(ctx context.Context) error {
	masters, err := a.masters(ctx)
	if err != nil {
		return err
	}
	per := max(1, a.cfg.Batch/len(masters))
	var (
		keys    []string
		dbsize  int64
		wrapped []string // masters whose SCAN finished a pass with this page
	)
	for _, n := range masters {
		addr := n.Options().Addr
		a.mu.Lock()
		cur := a.cursors[addr]
		a.mu.Unlock()
		page, next, err := n.Scan(ctx, cur, schema.RedisKeyPattern(a.cfg.Namespace), int64(per)).Result()
		if err != nil {
			return fmt.Errorf("audit: scan %s: %w", addr, err)
		}
		size, err := n.DBSize(ctx).Result()
		if err != nil {
			return fmt.Errorf("audit: dbsize %s: %w", addr, err)
		}
		dbsize += size
		keys = append(keys, page...)
		a.mu.Lock()
		a.cursors[addr] = next
		a.mu.Unlock()
		if next == 0 {
			wrapped = append(wrapped, addr)
		}
	}
	entries, err := inspect.ReadEntries(ctx, a.d.Redis, a.cfg.Namespace, keys)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if err := a.sizes(ctx, entries, len(keys), dbsize); err != nil {
		return err
	}
	a.mu.Lock()
	for _, addr := range wrapped {
		a.masterDone(addr, len(masters))
	}
	a.mu.Unlock()
	if len(entries) == 0 {
		return nil
	}
	// One statement per admission: the source never sees more rows at once
	// than the budget admitted at once (a batch admitted in parts over a
	// second, then read in one statement, was a burst past the budget's).
	rows := make(map[string]sourceRow, len(entries))
	for part := range slices.Chunk(entries, max(1, a.d.Budget.BackgroundReadsAtOnce())) {
		if err := a.d.Budget.AcquireBackground(ctx, len(part)); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		got, err := a.sourceRows(ctx, part)
		if err != nil {
			return err
		}
		maps.Copy(rows, got)
	}
	// The content of an entry at the source's version: its payload's digest
	// against the display's (read after the entry, as the versions are).
	var same []inspect.Entry
	for _, e := range entries {
		if r := rows[schema.Key(e.Tenant, e.Item)]; r.Found && r.digest != "" && !e.NF && !e.Stale && e.V == r.Version {
			same = append(same, e)
		}
	}
	digests, err := a.cachedDigests(ctx, same)
	if err != nil {
		return err
	}
	wm, now := a.d.Cache.Watermark(), time.Now()
	violations := 0
	for _, e := range entries {
		key := schema.Key(e.Tenant, e.Item)
		row := rows[key]
		kind, f := a.classify(e, row.SourceRow, wm, now)
		if kind == "" {
			if d, ok := digests[key]; ok && d != row.digest && compareContent {
				kind = KindContent
			}
		}
		if kind == "" {
			continue
		}
		violations++
		a.m.violations.WithLabelValues(kind).Inc()
		if kind == KindBehindServable {
			a.repair(ctx, f, e)
		} else {
			a.evict(ctx, kind, e, row.SourceRow)
		}
	}
	a.m.checked.Add(float64(len(entries)))
	a.record(round{at: now, checked: len(entries), violations: violations})
	return nil
}

// classify names the violation of one entry, "" when there is none.
func (a *Auditor) classify(e inspect.Entry, row inspect.SourceRow, wm cache.Watermark, now time.Time) (string, *inspect.Finding) {
	f := inspect.Judge(e, row, wm, a.cfg.SLO, now)
	switch {
	case f == nil:
		return "", nil
	case !row.Found && !e.NF:
		return KindWrongTenant, f
	case row.Found && row.Version < e.V:
		return KindAhead, f
	case f.SourceVersion > f.CachedVersion && !f.Invalidated && f.ServedForS > 0 && f.BehindForS > a.cfg.Grace.Seconds():
		return KindBehindServable, f
	}
	return "", f // behind but invalidated, expired, or within Grace: the pipeline's normal work
}

// repair raises the entry's floor to the source version: from then on a
// lookup refreshes it instead of serving it.
func (a *Auditor) repair(ctx context.Context, f *inspect.Finding, e inspect.Entry) {
	res, err := a.d.Cache.Invalidate(ctx, f.Tenant, f.Item, f.SourceVersion)
	attrs := []any{"tenant", f.Tenant, "item", f.Item, "cached_version", f.CachedVersion, "source_version", f.SourceVersion,
		"behind_for_s", f.BehindForS, "would_be_served_for_s", f.ServedForS, "floor", e.Floor,
		"observed_at", time.UnixMilli(e.Obs).UTC(), "slo_violation", f.Violation}
	if err != nil {
		a.log.Error("audit: behind entry still servable; repair failed", append(attrs, "err", err)...)
		return
	}
	a.m.repairs.Inc()
	a.log.Error("audit: behind entry was servable; floor raised to the source version", append(attrs, "result", res)...)
}

// evict deletes an entry the source cannot vouch for: one cached under a
// key this table has no row for (another table's reader in the namespace,
// a tenant mix-up), one ahead of its row (a restore, or another mapping),
// or one at the row's version with another display (a write that did not
// raise the version, or another mapping). Its floor and lease go with it,
// so no fill of a read started before lands; the next reader reads the
// source. When unsure, drop the cached value.
func (a *Auditor) evict(ctx context.Context, kind string, e inspect.Entry, row inspect.SourceRow) {
	attrs := []any{"kind", kind, "tenant", e.Tenant, "item", e.Item, "cached_version", e.V, "source_found", row.Found,
		"source_version", row.Version, "source_state", row.State, "observed_at", time.UnixMilli(e.Obs).UTC()}
	if err := a.d.Cache.Purge(ctx, e.Tenant, e.Item); err != nil {
		a.log.Error("audit: cached entry disagrees with the source; eviction failed", append(attrs, "err", err)...)
		return
	}
	a.m.evictions.WithLabelValues(kind).Inc()
	a.log.Error("audit: cached entry disagrees with the source; evicted", attrs...)
}

// record adds a round to the window and updates the consistency gauges.
func (a *Auditor) record(r round) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.window = append(a.window, r)
	cut := sort.Search(len(a.window), func(i int) bool { return r.at.Sub(a.window[i].at) < a.cfg.Window })
	a.window = a.window[cut:]
	var checked, bad int
	for _, w := range a.window {
		checked += w.checked
		bad += w.violations
	}
	if checked == 0 {
		return
	}
	a.m.ratio.Set(1 - float64(bad)/float64(checked))
	// With no violation in n checks the evidence supports about log10(n)
	// nines, not infinitely many.
	a.m.nines.Set(math.Log10(float64(checked) / float64(max(bad, 1))))
}

// masters lists the client of every master (the one server of a standalone
// client).
func (a *Auditor) masters(ctx context.Context) ([]*redis.Client, error) {
	switch r := a.d.Redis.(type) {
	case *redis.Client:
		return []*redis.Client{r}, nil
	case *redis.ClusterClient:
		var (
			mu  sync.Mutex
			out []*redis.Client
		)
		err := r.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			out = append(out, c)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("audit: list masters: %w", err)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Options().Addr < out[j].Options().Addr })
		return out, nil
	}
	return nil, fmt.Errorf("audit: unsupported redis client %T", a.d.Redis)
}
