package api

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/reader"
	"github.com/tidemark/tidemark/rollout"
)

// rollouts is this process's view of the tenants' serving modes (package
// rollout; docs/design.md, "Rollout, rollback and upgrades"): polled from
// the cache tier every RolloutPoll and checked against the durable record in
// Postgres when the copy changed, shrank or was lost (decide), with the
// shadow comparisons of reads
// routed to the source, whose counts it adds to the store on the same tick
// and from which it halts a ramp whose mismatch rate crosses the threshold.
type rollouts struct {
	cfg   Config
	store *rollout.Store
	def   rollout.Setting
	cur   atomic.Pointer[rollout.Settings]
	// decided: cur holds settings this process verified (else the default
	// before the first poll, or every tenant from the source when the first
	// polls could not tell which settings are in force). gen is the
	// generation of cur; recGen the generation of Postgres's record as last
	// read (-1: not yet). Only the poller touches them.
	decided bool
	gen     int64
	recGen  int64
	log     *slog.Logger
	m       *rolloutMetrics
	now     func() time.Time

	mu      sync.Mutex
	pending map[string]rollout.Counts // comparisons not yet added to the store
	slots   chan struct{}             // bounds concurrent comparison lookups; a full set skips the sample
	waiting atomic.Int64              // comparisons waiting out the grace (at most maxShadowWaiting)
	sampled atomic.Int64              // mismatch log lines this second (rate-limited)
	logSec  atomic.Int64
}

// maxShadowWaiting caps the comparisons of one process waiting out the
// grace before their second lookup.
const maxShadowWaiting = 4096

type rolloutMetrics struct {
	reads      *prometheus.CounterVec
	readsBy    map[rollout.Mode]prometheus.Counter // reads' children, resolved once: every GET counts one
	checks     *prometheus.CounterVec
	halts      prometheus.Counter
	losses     prometheus.Counter
	pollErrors prometheus.Counter
	skipped    prometheus.Counter
}

func newRollouts(cfg Config, rdb redis.UniversalClient, db rollout.DB, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*rollouts, error) {
	def := rollout.Default
	if cfg.RolloutDefault != "" {
		m, err := rollout.ParseMode(cfg.RolloutDefault)
		if err != nil {
			return nil, err
		}
		def = rollout.Setting{Mode: m}
		if m == rollout.ModeCache {
			def.Ramp, def.Safe = 100, 100
		}
	}
	in := telemetry.NewExclusiveInstruments(reg)
	m := &rolloutMetrics{
		reads: in.CounterVec("tidemark_api_rollout_reads_total",
			"GETs by the serving mode their tenant's rollout setting routed them to (cache, source, shadow).", "route"),
		checks: in.CounterVec("tidemark_api_shadow_checks_total",
			"Shadow comparisons of a source answer with the cache tier, by outcome (match, cache_older_than_allowed, cache_newer_than_source, missing); per-tenant counts are in `tidemark rollout status`.",
			"outcome"),
		halts: in.Counter("tidemark_api_rollout_halts_total",
			"Ramps this process halted (fell back to their safe step) because the tenant's shadow mismatch rate crossed the threshold."),
		losses: in.Counter("tidemark_api_rollout_losses_total",
			"Times this process found the cache tier's copy of the rollout settings lost or older than Postgres's record; it served the record's settings and put them back."),
		pollErrors: in.Counter("tidemark_api_rollout_poll_errors_total",
			"Failed reads or writes of the rollout store (the last settings stay in force)."),
		skipped: in.Counter("tidemark_api_shadow_skipped_total",
			"Sampled shadow comparisons skipped because the comparisons already running filled their slots."),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	m.readsBy = map[rollout.Mode]prometheus.Counter{}
	for _, r := range []rollout.Mode{rollout.ModeCache, rollout.ModeSource, rollout.ModeShadow} {
		m.readsBy[r] = m.reads.WithLabelValues(string(r))
	}
	for _, o := range rollout.Outcomes {
		m.checks.WithLabelValues(o)
	}
	r := &rollouts{cfg: cfg, store: rollout.NewStore(rdb, cfg.sourcePool()).WithDB(db), def: def, log: log, m: m, now: now,
		recGen: -1, pending: map[string]rollout.Counts{}, slots: make(chan struct{}, 16)}
	r.cur.Store(&rollout.Settings{})
	return r, nil
}

// read is the counter of GETs routed to mode.
func (m *rolloutMetrics) read(mode rollout.Mode) prometheus.Counter {
	if c, ok := m.readsBy[mode]; ok {
		return c
	}
	return m.reads.WithLabelValues(string(mode))
}

// route is the mode of one read.
func (r *rollouts) route(tenant, item string) (rollout.Mode, rollout.Setting) {
	st := r.cur.Load().For(tenant, r.def)
	return st.Route(tenant, item), st
}

// run polls the settings and flushes the shadow counts until ctx ends.
func (r *rollouts) run(ctx context.Context) {
	r.tick(ctx)
	lifecycle.Every(ctx, r.cfg.RolloutPoll, func() { r.tick(ctx) })
}

func (r *rollouts) tick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(r.cfg.RolloutPoll, time.Second))
	defer cancel()
	r.mu.Lock()
	pending := r.pending
	r.pending = map[string]rollout.Counts{}
	r.mu.Unlock()
	if err := r.store.Record(ctx, pending); err != nil {
		r.m.pollErrors.Inc()
		r.log.Warn("rollout: shadow counts not recorded", "err", err)
	}
	ss, ok := r.decide(ctx)
	if !ok {
		return
	}
	r.cur.Store(&ss)
	if len(pending) > 0 && r.decided {
		r.judge(ctx, ss)
	}
}

// sourceOnly is what a process serves while it cannot tell which settings
// are in force: every tenant from the source (the strictest mode: a
// rolled-back tenant is never served from the cache by mistake).
var sourceOnly = rollout.Settings{rollout.AllTenants: {Mode: rollout.ModeSource}}

// decide is the settings in force, from the cache tier's copy, checked
// against Postgres's record when the copy is not known to be at or past it:
// at the first poll, and whenever the copy's generation moved past the
// record last read, fell below the settings in force, or the copy could not
// be read (so a steady deployment reads Postgres only once per change). A
// copy behind the record (lost by the cache tier) is a loss: the record's
// settings are served and put back. ok false: keep the current settings.
func (r *rollouts) decide(ctx context.Context) (rollout.Settings, bool) {
	c, cerr := r.store.Copy(ctx)
	if cerr == nil && c.Written && c.Gen == 0 {
		c, cerr = r.store.Adopt(ctx) // written by a release before generations
	}
	if cerr == nil && r.recGen >= 0 && c.Gen == r.recGen && c.Gen >= r.gen {
		r.gen, r.decided = c.Gen, true
		return c.Settings, true
	}
	d, derr := r.store.Durable(ctx)
	if derr == nil {
		r.recGen = d.Gen
	}
	switch {
	case cerr == nil && derr == nil && c.Gen >= d.Gen:
		if c.Gen > d.Gen {
			// A change whose writer could not record it: record it here.
			if _, err := r.store.Save(ctx, c); err != nil {
				r.m.pollErrors.Inc()
				r.log.Warn("rollout: settings not recorded in Postgres", "generation", c.Gen, "err", err)
			} else {
				r.recGen = c.Gen
			}
		}
		r.gen, r.decided = c.Gen, true
		return c.Settings, true
	case derr == nil && cerr == nil:
		r.m.losses.Inc()
		r.log.Error("rollout: the cache tier lost its copy of the rollout settings (data loss or a restore); serving Postgres's record and putting it back",
			"copy_generation", c.Gen, "copy_present", c.Written, "record_generation", d.Gen)
		if _, err := r.store.Restore(ctx, d, r.now()); err != nil {
			r.m.pollErrors.Inc()
			r.log.Warn("rollout: copy not restored", "err", err)
		}
		r.gen, r.decided = d.Gen, true
		return d.Settings, true
	case derr == nil:
		r.m.pollErrors.Inc()
		r.log.Warn("rollout: settings unreadable in the cache tier; serving Postgres's record", "err", cerr)
		r.gen, r.decided = d.Gen, true
		return d.Settings, true
	case cerr == nil && c.Gen > 0 && c.Gen >= r.gen:
		// Postgres cannot be asked; the copy is at or past what this
		// process last verified and was written with a generation.
		r.m.pollErrors.Inc()
		r.log.Warn("rollout: the settings' record in Postgres unreadable; following the cache tier's copy", "generation", c.Gen, "err", derr)
		r.gen, r.decided = c.Gen, true
		return c.Settings, true
	}
	r.m.pollErrors.Inc()
	if r.decided {
		r.log.Error("rollout: cannot tell which rollout settings are in force (the cache tier's copy is lost or behind and Postgres's record unreadable); keeping the last ones",
			"copy_err", cerr, "record_err", derr, "copy_generation", c.Gen, "generation", r.gen)
		return nil, false
	}
	r.log.Error("rollout: cannot tell which rollout settings are in force (the cache tier's copy is lost or unreadable and Postgres's record unreadable); serving every tenant from the source until one can be read",
		"copy_err", cerr, "record_err", derr)
	return sourceOnly, true
}

// judge halts the ramps whose shadow mismatch rate crosses the threshold
// over at least HaltMinChecks comparisons of the current step.
func (r *rollouts) judge(ctx context.Context, ss rollout.Settings) {
	counts, err := r.store.Shadow(ctx)
	if err != nil {
		r.m.pollErrors.Inc()
		r.log.Warn("rollout: shadow counts unreadable", "err", err)
		return
	}
	for tenant, c := range counts {
		st := ss.For(tenant, r.def)
		if st.Mode != rollout.ModeCache || st.Ramp <= st.Safe || c.Total() < int64(r.cfg.HaltMinChecks) {
			continue
		}
		rate := float64(c.Mismatches()) / float64(c.Total())
		if rate < r.cfg.HaltMismatchRate {
			continue
		}
		reason := fmt.Sprintf("%d of %d shadow checks mismatched at %g%% (threshold %g); back to %g%%",
			c.Mismatches(), c.Total(), st.Ramp, r.cfg.HaltMismatchRate, st.Safe)
		halted, err := r.store.Halt(ctx, tenant, st, reason, r.now())
		if err != nil {
			// Not recorded in Postgres: the halt is in the copy, and the
			// next poll records it.
			r.m.pollErrors.Inc()
			r.log.Warn("rollout: halt not stored", "tenant", tenant, "in_copy", halted, "err", err)
		}
		if halted {
			r.m.halts.Inc()
			r.log.Error("rollout: ramp halted by shadow mismatches", "tenant", tenant, "reason", reason)
		}
	}
}

// record counts one comparison.
func (r *rollouts) record(tenant, outcome string) {
	r.m.checks.WithLabelValues(outcome).Inc()
	r.mu.Lock()
	c := r.pending[tenant]
	if c == nil {
		c = rollout.Counts{}
		r.pending[tenant] = c
	}
	c[outcome]++
	r.mu.Unlock()
}

// logMismatch logs at most 10 mismatches a second, each with its key.
func (r *rollouts) logMismatch(msg string, args ...any) {
	sec := time.Now().Unix()
	if r.logSec.Swap(sec) != sec {
		r.sampled.Store(0)
	}
	if r.sampled.Add(1) <= 10 {
		r.log.Warn(msg, args...)
	}
}

// serveFromSource answers a GET routed to the source by its tenant's
// rollout setting: one read per key at a time in this process, under the
// same budget as every miss (so a rollback of every tenant cannot send more
// than the class budgets to the source: the rest get 503 with Retry-After),
// nothing filled. A shadow read also compares a sample with the cache tier.
func (s *Server) serveFromSource(r *http.Request, q reader.Query, shadow bool) reader.Result {
	rr := s.rd.FromSource(r.Context(), q, "detail=rollout-source")
	if !rr.Shared && shadow && (rr.Kind == reader.Found || rr.Kind == reader.NotFound) && rand.Float64() < s.cfg.ShadowSample {
		s.shadowCompare(q.Tenant, q.Item, rr)
	}
	return rr
}

// shadowCompare looks the key up in the cache tier after the source
// answered and classifies what the cache would have served. An older cached
// version the cache would still serve is judged again after ShadowGrace: only
// if it is still served then is it older than allowed (the pipeline had its
// time to deliver the invalidation). It runs in the background on a bounded
// number of slots; a lease a lookup hands out is given back at once.
func (s *Server) shadowCompare(tenant, id string, src reader.Result) {
	select {
	case s.rollout.slots <- struct{}{}:
	default:
		s.rollout.m.skipped.Inc()
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		outcome, detail := s.shadowJudge(tenant, id, src, false)
		<-s.rollout.slots
		if outcome == "" {
			// The wait holds no lookup slot; the waiting comparisons have a
			// cap of their own.
			if s.rollout.waiting.Add(1) > maxShadowWaiting {
				s.rollout.waiting.Add(-1)
				s.rollout.m.skipped.Inc()
				return
			}
			t := time.NewTimer(s.cfg.ShadowGrace)
			select {
			case <-s.base.Done():
				t.Stop()
				s.rollout.waiting.Add(-1)
				return
			case <-t.C:
			}
			s.rollout.waiting.Add(-1)
			s.rollout.slots <- struct{}{}
			outcome, detail = s.shadowJudge(tenant, id, src, true)
			<-s.rollout.slots
		}
		s.rollout.record(tenant, outcome)
		if rollout.Mismatch(outcome) {
			s.rollout.logMismatch("shadow read: the cache disagrees with the source", "tenant", tenant, "item", id,
				"outcome", outcome, "detail", detail, "source_version", src.Version, "source_found", src.Kind == reader.Found)
		}
	}()
}

// shadowJudge is one comparison; "" means "older but maybe still in
// flight: judge again after the grace" (only when final is false).
func (s *Server) shadowJudge(tenant, id string, src reader.Result, final bool) (outcome, detail string) {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.LookupTimeout)
	defer cancel()
	lr, err := s.cache.Lookup(ctx, tenant, id, 0)
	if err != nil {
		return rollout.OutcomeMissing, "lookup failed: " + err.Error()
	}
	if !lr.Token.IsZero() {
		// The lease is this comparison's: a miss or a stale entry is
		// (re)filled by a read of its own under the background budget, so
		// shadow reads warm the cache they will be compared with (a fill
		// from the answer's own read could not be: that read started
		// before the lease, and an invalidation in between would be lost).
		s.shadowFill(tenant, id, lr.Token, lr.Status == cache.StatusMiss)
	}
	e := lr.Entry
	now := s.clock.Now()
	served := (lr.Status == cache.StatusHit || (lr.Status == cache.StatusStale && !e.Stale)) && now.Before(e.Hard)
	switch lr.Status {
	case cache.StatusMiss, cache.StatusWait:
		return rollout.OutcomeMissing, ""
	case cache.StatusNotFound:
		if src.Kind == reader.NotFound || !now.Before(e.Hard) {
			return rollout.OutcomeMatch, ""
		}
		if final {
			return rollout.OutcomeOlder, "cached not-found, the source has version " + strconv.FormatInt(src.Version, 10)
		}
		return "", ""
	}
	// A value the cache would serve must keep the promise: its hard
	// deadline at most the promise's hard lifetime after its effective
	// observation (not this process's --cache-hard-lifetime: another
	// process may fill with a longer one),
	// and that observation not in the future (beyond the allowed skew).
	if served && (e.Hard.Sub(e.EffObs) > promise.HardLifetime+time.Millisecond || e.EffObs.After(now.Add(200*time.Millisecond))) {
		return rollout.OutcomeOlder, fmt.Sprintf("deadline beyond the promise: effective observation %s, hard %s",
			e.EffObs.UTC().Format(time.RFC3339Nano), e.Hard.UTC().Format(time.RFC3339Nano))
	}
	switch {
	case src.Kind == reader.NotFound && src.Version == 0:
		// The source has no row (or a tombstone whose version the read did
		// not report): a cached value is either newer or from elsewhere.
		if !served {
			return rollout.OutcomeMatch, "not served"
		}
		if final {
			return rollout.OutcomeNewer, "cached version " + strconv.FormatInt(e.Version, 10) + ", no row at the source"
		}
		return "", ""
	case e.Version == src.Version:
		return rollout.OutcomeMatch, ""
	case e.Version > src.Version:
		return rollout.OutcomeNewer, "cached version " + strconv.FormatInt(e.Version, 10)
	case !served:
		return rollout.OutcomeMatch, "older version invalidated or expired"
	case final:
		return rollout.OutcomeOlder, "cached version " + strconv.FormatInt(e.Version, 10) + " still served " + s.cfg.ShadowGrace.String() + " after the source had a newer one"
	}
	return "", ""
}

// rolloutRamping: the tenant is on a cache ramp below 100 %, so its reads
// routed to the source are shadow-compared too (the evidence a halt needs).
func (s *Server) rolloutRamping(tenant string) bool {
	_, st := s.rollout.route(tenant, "")
	return st.Mode == rollout.ModeCache && st.Ramp < 100
}

// shadowFill reads the source under the background budget (a refusal only
// means the lease is given back unfilled) and fills the lease; a new key
// obeys admission like any miss.
func (s *Server) shadowFill(tenant, id string, tok cache.Token, newKey bool) {
	s.rd.FillInBackground(tenant, id, tok, newKey)
}
