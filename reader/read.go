package reader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cache"
)

// Kind is how a read ends.
type Kind int

const (
	Found         Kind = iota // the item, at least MinVersion (HTTP 200)
	NotFound                  // absent or a tombstone (404)
	BelowMin                  // the source itself is below MinVersion (412); Version is its version
	Unavailable               // budget spent, source down or lease wait timed out (503 with RetryAfter)
	BadMinVersion             // the source itself is more than MinVersionSlack below MinVersion (400); Version is its version
)

// Query is one read.
type Query struct {
	Tenant, Item string
	// MinVersion > 0: a read of the caller's own write (read-your-writes):
	// metered in its own budget class, answered BelowMin while the source
	// itself is below it.
	MinVersion int64
	// Spread picks which copy of a hot key this read uses (a hash of the
	// client connection keeps one connection on one copy).
	Spread uint64
}

// Result is the outcome of a read.
type Result struct {
	Kind    Kind
	Version int64
	Payload []byte
	EffObs  time.Time // the effective source observation the value's age counts from
	// Hard is the effective hard deadline: the value is never answered at
	// or after it (Get checked it last, right before returning).
	Hard        time.Time
	CacheStatus string        // RFC 9211 Cache-Status value
	RetryAfter  time.Duration // Unavailable: when to ask again
	Message     string        // BadMinVersion: why
	Shared      bool          // another read in this process resolved it (singleflight)
	fwd         bool          // went to the source (shared results then say "collapsed")
}

func unavailable(detail string, retry time.Duration) Result {
	return Result{Kind: Unavailable, CacheStatus: "tidemark; fwd=miss; detail=" + detail, RetryAfter: retry}
}

// Get answers q by the read algorithm: the below-min memo, L1, then one
// resolution per key in this process (a hot key's replica, else cache
// lookup, then serve, wait for another reader's fill, or read the source
// under the budget and fill the lease), and the last check of the hard
// deadline.
// ctx bounds the caller's wait; the shared resolution runs on its own
// RequestTimeout so one caller leaving cannot fail the others.
func (rd *Reader) Get(ctx context.Context, q Query) Result {
	tenant, id, minVersion := q.Tenant, q.Item, q.MinVersion
	key := tenant + "\x00" + id
	if rr, ok := rd.memoBelow(key, minVersion); ok {
		return rr
	}
	e, ok := rd.l1.get(key, minVersion, rd.clock.Wall())
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("l1", trace.WithAttributes(attribute.Bool("hit", ok)))
	}
	if use, _ := rd.cacheable(); ok && use {
		// The deadline is only set up past L1: an L1 answer waits for
		// nothing, and lastCheck bounds its own rare fresh read.
		rd.m.l1Hits.Inc()
		return rd.lastCheck(ctx, tenant, id, minVersion, Result{Kind: Found, Version: e.version,
			Payload: e.payload, EffObs: e.effObs, Hard: e.hard, CacheStatus: "tidemark; hit; detail=l1"})
	}
	ctx, cancel := context.WithTimeout(ctx, rd.cfg.RequestTimeout)
	defer cancel()
	// A hot key's copy is read inside the shared resolution: one copy read
	// per key at a time in this process, and its answer goes to L1.
	return rd.shared(ctx, key+"\x00"+strconv.FormatInt(minVersion, 10), tenant, id, minVersion, func(rctx context.Context) Result {
		if rr, ok := rd.replicaRead(rctx, tenant, id, minVersion, q.Spread); ok {
			return rr
		}
		return rd.resolve(rctx, tenant, id, minVersion)
	})
}

// FromSource answers q from the source alone, under the same budget as
// every miss and one read per key at a time in this process, filling
// nothing (a tenant whose serving mode is the source). detail names why in
// the Cache-Status.
func (rd *Reader) FromSource(ctx context.Context, q Query, detail string) Result {
	tenant, id, minVersion := q.Tenant, q.Item, q.MinVersion
	key := tenant + "\x00" + id
	if rr, ok := rd.memoBelow(key, minVersion); ok {
		return rr
	}
	ctx, cancel := context.WithTimeout(ctx, rd.cfg.RequestTimeout)
	defer cancel()
	return rd.shared(ctx, "source\x00"+key+"\x00"+strconv.FormatInt(minVersion, 10), tenant, id, minVersion, func(rctx context.Context) Result {
		return rd.fetch(rctx, tenant, id, minVersion, cache.Token{}, detail)
	})
}

// memoBelow answers a min_version read the below-min memo already proves
// unreachable.
func (rd *Reader) memoBelow(key string, minVersion int64) (Result, bool) {
	if minVersion <= 0 {
		return Result{}, false
	}
	if v, ok := rd.belowMin.below(key, minVersion, rd.clock.Wall()); ok {
		if rd.beyondSlack(minVersion, v) {
			return rd.minVersionTooHigh(v, "tidemark; hit"), true
		}
		return Result{Kind: BelowMin, Version: v, CacheStatus: "tidemark; hit; detail=below-min-memo"}, true
	}
	return Result{}, false
}

// shared runs resolve once per flight key in this process for every
// caller, within the per-key waiter cap, and checks the answer's deadline
// last.
func (rd *Reader) shared(ctx context.Context, flight, tenant, id string, minVersion int64, resolve func(context.Context) Result) Result {
	key := tenant + "\x00" + id
	if !rd.waiters.enter(key) {
		return unavailable("too-many-waiters", time.Second)
	}
	defer rd.waiters.leave(key)
	span := trace.SpanFromContext(ctx)
	ch := rd.reads.DoChan(flight, func() (any, error) {
		// The resolution's spans are children of the read that started it.
		rctx, rcancel := context.WithTimeout(trace.ContextWithSpan(rd.base, span), rd.cfg.RequestTimeout)
		defer rcancel()
		return resolve(rctx), nil
	})
	select {
	case res := <-ch:
		rr := res.Val.(Result)
		if span.IsRecording() {
			span.SetAttributes(attribute.Bool(attrShared, res.Shared))
		}
		if res.Shared && rr.fwd {
			rr.CacheStatus += "; collapsed"
		}
		rr.Shared = res.Shared
		return rd.lastCheck(ctx, tenant, id, minVersion, rr)
	case <-ctx.Done():
		return unavailable("timeout", time.Second)
	}
}

// lastCheck is the deadline check right before an answer, on every path
// (L1, cache hit, stale fallback, singleflight joiners, source reads): the
// answer's hard deadline must still be ahead by the Redis-synchronised
// clock. Otherwise it is answered as a hard-expired entry is: one fresh read
// under the budget, or Unavailable. The fresh read is bounded by
// RequestTimeout (ctx may be the caller's own, without a deadline, on the
// L1 path).
func (rd *Reader) lastCheck(ctx context.Context, tenant, id string, minVersion int64, rr Result) Result {
	if rr.Hard.IsZero() || rd.clock.Now().Before(rr.Hard) {
		return rr
	}
	rd.m.deadlineRefusals.Inc()
	ctx, cancel := context.WithTimeout(ctx, rd.cfg.RequestTimeout)
	defer cancel()
	if ctx.Err() == nil {
		fresh := rd.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=hard-expired")
		if fresh.Hard.IsZero() || rd.clock.Now().Before(fresh.Hard) {
			return fresh
		}
	}
	return unavailable("hard-expired", time.Second)
}

// Forget drops what this process remembers of an item's source reads
// below a min_version, after a write of it through this process.
func (rd *Reader) Forget(tenant, item string) { rd.belowMin.forget(tenant + "\x00" + item) }

// resolve runs the read path: cache Lookup, then by its answer serve, wait,
// or read the source under the foreground budget and fill the lease.
func (rd *Reader) resolve(ctx context.Context, tenant, id string, minVersion int64) Result {
	if use, detail := rd.cacheable(); !use {
		// This host's clock is out of bounds (or not measured): its view of
		// deadlines cannot be trusted; or the namespace is another
		// deployment's (identity.go). Nothing is answered from or filled
		// into the cache.
		return rd.fetch(ctx, tenant, id, minVersion, cache.Token{}, detail)
	}
	key := tenant + "\x00" + id
	waited := false
	// One span for the whole wait on another reader's lease, however many
	// lookups it takes; ended by the first answer that is not "wait".
	var wait trace.Span
	endWait := func() {
		if wait != nil {
			wait.End()
			wait = nil
		}
	}
	defer endWait()
	for {
		lctx, lcancel := context.WithTimeout(ctx, rd.cfg.LookupTimeout)
		var lspan trace.Span
		if wait == nil {
			lspan = rd.child(ctx, spanLookup) // the lookups inside a wait are the wait's
		}
		// sent: when the round trip that answered was sent (lookupbatch.go)
		lr, sent, sentWall, err := rd.lookups.lookup(lctx, tenant, id, minVersion)
		lcancel()
		if lspan != nil {
			if err != nil {
				fail(lspan, err)
			} else if lspan.IsRecording() {
				lspan.SetAttributes(attribute.String(attrLookup, string(lr.Status)), attribute.Int64(attrVersion, lr.Entry.Version))
			}
			lspan.End()
		}
		if err == nil {
			rd.offerManifest(tenant, id, lr, sent)
		}
		if err == nil && lr.Status != cache.StatusWait {
			endWait()
		}
		if err != nil {
			if ctx.Err() != nil {
				return Result{Kind: Unavailable, CacheStatus: "tidemark; fwd=miss; detail=timeout", RetryAfter: time.Second}
			}
			// The cache tier is down: a bounded direct read (same budget and
			// in-flight cap), nothing filled.
			rd.log.Debug("cache lookup failed; reading the source directly", "tenant", tenant, "item", id, "err", err)
			return rd.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=cache-unavailable")
		}
		e := lr.Entry
		if (lr.Status == cache.StatusHit || lr.Status == cache.StatusStale) && !rd.clock.Now().Before(e.Hard) {
			// Redis's clock still said yes; ours says the hard deadline has
			// passed. The deadline wins: read the source, fill nothing.
			rd.releaseLease(ctx, tenant, id, lr.Token)
			return rd.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=hard-expired")
		}
		switch lr.Status {
		case cache.StatusHit:
			if e.Version >= minVersion {
				rd.l1.offer(key, e.Version, e.Payload, e.EffObs, e.Hard, sentWall, rd.clock.Wall())
				st := "tidemark; hit"
				if waited {
					st += "; detail=waited"
				}
				return Result{Kind: Found, Version: e.Version, Payload: e.Payload, EffObs: e.EffObs, Hard: e.Hard, CacheStatus: st}
			}
		case cache.StatusStale:
			if e.Stale {
				// Invalidated: a newer version is committed and applied. The old
				// value is a fallback for when the source cannot answer, never
				// the normal answer: the lease holder reads the source now, the
				// others wait for its fill while the request has time left.
				if !lr.Token.IsZero() {
					if rr := rd.fetch(ctx, tenant, id, minVersion, lr.Token, "detail=invalidated"); rr.Kind != Unavailable {
						return rr
					}
				} else if dl, ok := ctx.Deadline(); ok && time.Until(dl) > staleFallbackReserve {
					waited = true
					if !sleepJitter(ctx) {
						continue
					}
				}
				if e.Version >= minVersion {
					return Result{Kind: Found, Version: e.Version, Payload: e.Payload, EffObs: e.EffObs, Hard: e.Hard, CacheStatus: "tidemark; hit; detail=stale-invalidated"}
				}
				return Result{Kind: Unavailable, CacheStatus: "tidemark; fwd=miss; detail=source-unavailable", RetryAfter: time.Second}
			}
			if !lr.Token.IsZero() {
				rd.refreshInBackground(tenant, id, lr.Token)
			}
			if e.Version >= minVersion {
				return Result{Kind: Found, Version: e.Version, Payload: e.Payload, EffObs: e.EffObs, Hard: e.Hard, CacheStatus: "tidemark; hit; detail=stale"}
			}
		case cache.StatusNotFound:
			if minVersion == 0 {
				return Result{Kind: NotFound, Hard: e.Hard, CacheStatus: "tidemark; hit; detail=not-found"}
			}
			// A writer asking for its own write must not be told "absent" by
			// a negative entry older than the write: ask the source.
			return rd.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=min-version")
		case cache.StatusMiss:
			return rd.fetch(ctx, tenant, id, minVersion, lr.Token, "")
		case cache.StatusWait:
			waited = true
			if wait == nil {
				wait = rd.child(ctx, spanLeaseWait)
			}
			if sleepJitter(ctx) {
				fail(wait, ctx.Err())
				return Result{Kind: Unavailable, CacheStatus: "tidemark; fwd=miss; detail=lease-wait", RetryAfter: time.Second}
			}
			continue
		}
		// A value below min_version that the cache still answered with: read
		// the source without a lease (nothing is filled).
		return rd.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=min-version")
	}
}

// releaseLease gives back a lease LOOKUP issued to a read that returns
// without filling, so the key's next reader misses at once instead of
// waiting out the lease (every early return of resolve that holds one).
func (rd *Reader) releaseLease(ctx context.Context, tenant, id string, tok cache.Token) {
	if tok.IsZero() {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	if _, err := rd.cache.Release(fctx, tenant, id, tok); err != nil {
		rd.log.Warn("lease release failed", "tenant", tenant, "item", id, "err", err) // it expires by itself
	}
}

// fetch reads the source under the foreground budget and, with a lease
// token, fills the cache with what it read.
func (rd *Reader) fetch(ctx context.Context, tenant, id string, minVersion int64, tok cache.Token, detail string) Result {
	status := func(stored bool, detail string) string {
		st := "tidemark; fwd=miss"
		if stored {
			st += "; stored"
		}
		if detail != "" {
			st += "; " + detail
		}
		return st
	}
	class := ClassForeground
	if minVersion > 0 {
		class = ClassReadYourWrites
	}
	it, obs, err := rd.sourceRead(ctx, class, tenant, id)
	if err != nil {
		// No fill will come: the lease goes back, so the key's next reader
		// (in any process) asks the budget at once instead of waiting out
		// the lease for nothing while the budget has room.
		rd.releaseLease(ctx, tenant, id, tok)
		rr := Result{Kind: Unavailable, CacheStatus: "tidemark; fwd=miss; detail=source-unavailable", RetryAfter: time.Second}
		var be *BudgetError
		if errors.As(err, &be) {
			rr.CacheStatus, rr.RetryAfter = "tidemark; fwd=miss; detail=budget", be.RetryAfter
		}
		return rr
	}
	stored := false
	if !tok.IsZero() {
		// Only a plain miss (no detail) creates a key: admission applies
		// to it; refills of an existing key only obey the size cap.
		stored = rd.fill(ctx, tenant, id, tok, it, obs, detail == "")
	}
	hard := obs.Add(rd.hardLifetime)
	switch {
	case it.exists() && it.Version < minVersion:
		rd.belowMin.remember(tenant+"\x00"+id, it.Version, rd.clock.Wall())
		if rd.beyondSlack(minVersion, it.Version) {
			return rd.minVersionTooHigh(it.Version, status(stored, ""))
		}
		return Result{Kind: BelowMin, Version: it.Version, Hard: hard, CacheStatus: status(stored, detail), fwd: true}
	case !it.Found:
		// Version: a tombstone's, for the shadow comparison (0: no row).
		return Result{Kind: NotFound, Version: it.Version, Hard: hard, CacheStatus: status(stored, detail), fwd: true}
	}
	return Result{Kind: Found, Version: it.Version, Payload: it.Payload, EffObs: obs, Hard: hard, CacheStatus: status(stored, detail), fwd: true}
}

// sourceRead is one budgeted read of the source. obs is when it started:
// the value's age counts from there, never from when the answer arrived.
func (rd *Reader) sourceRead(ctx context.Context, class, tenant, id string) (Item, time.Time, error) {
	if err := ctx.Err(); err != nil { // nobody waits for this read any more: spend no budget on it
		return Item{}, time.Time{}, fmt.Errorf("reader: source read: %w", err)
	}
	span := rd.child(ctx, spanSource)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrClass, class))
	}
	release, err := rd.budget.acquire(ctx, class, tenant)
	if err != nil {
		fail(span, err)
		return Item{}, time.Time{}, err
	}
	span.AddEvent("budget admitted")
	obs := rd.clock.Wall()
	// Admitted reads run to their own deadline even if the caller gives up:
	// the budget is spent, and the fill still helps the next reader. The
	// deadline (SourceTimeout and a margin for the round trip) bounds a
	// source that has no timeout of its own.
	sctx, scancel := context.WithTimeout(WithClass(context.WithoutCancel(ctx), class), rd.cfg.SourceTimeout+sourceMargin)
	it, err := rd.src.Read(sctx, tenant, id)
	scancel()
	release()
	if !it.Found {
		it.Payload = nil
	}
	switch {
	case err != nil && isTimeout(err):
		rd.m.sourceReads.WithLabelValues(class, "timeout").Inc()
	case err != nil:
		rd.m.sourceReads.WithLabelValues(class, "error").Inc()
	case !it.Found:
		rd.m.sourceReads.WithLabelValues(class, "not_found").Inc()
	default:
		rd.m.sourceReads.WithLabelValues(class, "found").Inc()
	}
	if err != nil {
		fail(span, err)
		rd.log.Warn("source read failed", "class", class, "tenant", tenant, "item", id, "err", err)
		return Item{}, time.Time{}, err
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("tidemark.found", it.Found), attribute.Int64(attrVersion, it.Version))
	}
	return it, obs, nil
}

// fill installs a source read under its lease. A rejection is normal (an
// invalidation overtook the read); it only means nothing was stored. A value
// over MaxValueBytes, or a new key the tenant's fill share does not admit
// (admission.go), is not cached: the lease is released so the key's next
// reader misses at once instead of waiting for a fill that never comes.
func (rd *Reader) fill(ctx context.Context, tenant, id string, tok cache.Token, it Item, obs time.Time, newKey bool) (stored bool) {
	span := rd.child(ctx, spanFill)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Bool(attrStored, stored), attribute.Int64(attrVersion, it.Version))
		}
		span.End()
	}()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	skip := ""
	switch {
	case rd.cfg.MaxValueBytes > 0 && int64(len(it.Payload)) > rd.cfg.MaxValueBytes:
		skip = skipTooLarge
	case newKey && !rd.admit.admit(tenant, id, rd.clock.Wall()):
		skip = skipAdmission
	}
	if skip != "" {
		span.AddEvent("skipped: " + skip)
		rd.m.fillsSkipped.WithLabelValues(skip).Inc()
		if _, err := rd.cache.Release(fctx, tenant, id, tok); err != nil {
			// The lease then expires by itself (readers wait at most its length).
			rd.log.Warn("lease release failed", "tenant", tenant, "item", id, "err", err)
		}
		return false
	}
	var err error
	if it.Found {
		err = rd.cache.Fill(fctx, tenant, id, tok, it.Version, it.Payload, obs)
	} else {
		err = rd.cache.FillNotFound(fctx, tenant, id, tok, obs)
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, cache.ErrRejected):
		span.AddEvent("rejected: an invalidation overtook the read")
		rd.log.Debug("fill rejected", "tenant", tenant, "item", id, "version", it.Version, "err", err)
	default:
		fail(span, err)
		rd.log.Warn("fill failed", "tenant", tenant, "item", id, "err", err)
	}
	return false
}

// refreshInBackground re-reads a stale value under the background budget; the
// caller already answered with the stale value.
func (rd *Reader) refreshInBackground(tenant, id string, tok cache.Token) {
	rd.bg.Add(1)
	go func() {
		defer rd.bg.Done()
		_, _, _ = rd.refreshes.Do(tenant+"\x00"+id, func() (any, error) { // reports nothing: see the nil returns
			ctx, cancel := context.WithTimeout(rd.base, rd.cfg.SourceTimeout+time.Second)
			defer cancel()
			it, obs, err := rd.sourceRead(ctx, ClassBackground, tenant, id)
			if err != nil {
				return nil, nil // stays stale until its hard deadline; the lease expires
			}
			rd.fill(ctx, tenant, id, tok, it, obs, false)
			return nil, nil
		})
	}()
}

// keyWaiters caps the GETs of one key waiting in this process (for a shared
// resolution or another reader's fill), so a crowd on one key cannot pile up
// goroutines and connections: beyond the cap, 503 at once.
type keyWaiters struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func (k *keyWaiters) enter(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key] >= k.max {
		return false
	}
	k.n[key]++
	return true
}

func (k *keyWaiters) leave(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key]--; k.n[key] <= 0 {
		delete(k.n, key)
	}
}

// isTimeout tells a slow source (client deadline or server statement timeout)
// from a failing one, for the metric.
func isTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pe) && pe.Code == "57014")
}

// sourceMargin is what a source read may take beyond SourceTimeout (the
// round trip of a statement the server timed out).
const sourceMargin = 500 * time.Millisecond

// staleFallbackReserve is the part of a request's deadline kept for
// answering with an invalidated value when its refresh has not landed.
const staleFallbackReserve = 100 * time.Millisecond

// sleepJitter waits 5-25 ms (jitter spreads the waiters' lookups) and
// reports whether ctx ended first.
func sleepJitter(ctx context.Context) (done bool) {
	t := time.NewTimer(5*time.Millisecond + rand.N(20*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-ctx.Done():
		return true
	}
}
