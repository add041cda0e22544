package api

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"tidemark/cache"
	"tidemark/rollout"
)

// readKind is how a GET ends.
type readKind int

const (
	readItem          readKind = iota // 200
	readNotFound                      // 404 (absent or tombstone)
	readBelowMin                      // 412: the source itself is below min_version
	readUnavailable                   // 503: budget spent, source down or lease wait timed out
	readBadMinVersion                 // 400: min_version beyond what any write could have produced
)

// readResult is the outcome of resolving one (tenant, item, min_version).
type readResult struct {
	kind        readKind
	version     int64
	payload     []byte
	effObs      time.Time // for Age
	hard        time.Time // effective hard deadline: never answered at or after it
	cacheStatus string    // RFC 9211 Cache-Status value
	fwd         bool      // went to the source (shared results then say "collapsed")
	retryAfter  time.Duration
	message     string // readBadMinVersion
}

func (s *Server) getItem(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if err := validID("item id", id); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var minVersion int64
	if v := r.URL.Query().Get("min_version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "min_version must be a non-negative integer")
			return
		}
		minVersion = n
	}
	ctx, span := s.startGet(r, tenant, id, minVersion)
	defer span.End()
	r = r.WithContext(ctx)
	respond := func(rr readResult) {
		endGet(span, rr)
		s.respondRead(w, id, rr)
	}
	key := tenant + "\x00" + id
	if minVersion > 0 {
		if v, ok := s.belowMin.below(key, minVersion, s.clock.Wall()); ok {
			respond(readResult{kind: readBelowMin, version: v, cacheStatus: "tidemark; hit; detail=below-min-memo"})
			return
		}
	}
	if route, _ := s.rollout.route(tenant, id); route != rollout.ModeCache {
		s.rollout.m.reads.WithLabelValues(string(route)).Inc()
		if span.IsRecording() {
			span.SetAttributes(attribute.String("tidemark.rollout", string(route)))
		}
		s.serveFromSource(w, r, tenant, id, minVersion, route == rollout.ModeShadow || s.rolloutRamping(tenant))
		return
	}
	s.rollout.m.reads.WithLabelValues(string(rollout.ModeCache)).Inc()
	e, ok := s.l1.get(key, minVersion, s.clock.Wall())
	if span.IsRecording() {
		span.AddEvent("l1", trace.WithAttributes(attribute.Bool("hit", ok)))
	}
	if ok && s.clock.Trusted() {
		// The request's deadline is only set up past L1: an L1 answer waits
		// for nothing, and lastCheck bounds its own rare fresh read.
		s.m.l1Hits.Inc()
		respond(s.lastCheck(r.Context(), tenant, id, minVersion, readResult{kind: readItem, version: e.version,
			payload: e.payload, effObs: e.effObs, hard: e.hard, cacheStatus: "tidemark; hit; detail=l1"}))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if rr, ok := s.replicaRead(ctx, r, tenant, id, minVersion); ok {
		respond(s.lastCheck(ctx, tenant, id, minVersion, rr))
		return
	}
	if !s.waiters.enter(key) {
		respond(readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=too-many-waiters", retryAfter: time.Second})
		return
	}
	defer s.waiters.leave(key)
	// One resolution per key and min_version in this process; the others share
	// it. It runs on its own deadline so one caller leaving cannot fail the rest.
	ch := s.reads.DoChan(key+"\x00"+strconv.FormatInt(minVersion, 10), func() (any, error) {
		// The resolution's spans are children of the GET that started it.
		rctx, rcancel := context.WithTimeout(trace.ContextWithSpan(s.base, span), s.cfg.RequestTimeout)
		defer rcancel()
		return s.resolve(rctx, tenant, id, minVersion), nil
	})
	select {
	case res := <-ch:
		rr := res.Val.(readResult)
		if span.IsRecording() {
			span.SetAttributes(attribute.Bool(attrShared, res.Shared))
		}
		if res.Shared && rr.fwd {
			rr.cacheStatus += "; collapsed"
		}
		respond(s.lastCheck(ctx, tenant, id, minVersion, rr))
	case <-ctx.Done():
		respond(readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=timeout", retryAfter: time.Second})
	}
}

// lastCheck is the deadline check right before a body is written, on every
// path (L1, cache hit, stale fallback, singleflight joiners, source reads):
// the answer's hard deadline must still be ahead by the Redis-synchronised
// clock. Otherwise it is answered as a hard-expired entry is: one fresh read
// under the budget, or 503. The fresh read is bounded by RequestTimeout
// (ctx may be the request's own, without a deadline, on the L1 path).
func (s *Server) lastCheck(ctx context.Context, tenant, id string, minVersion int64, rr readResult) readResult {
	if rr.hard.IsZero() || s.clock.Now().Before(rr.hard) {
		return rr
	}
	s.m.deadlineRefusals.Inc()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if ctx.Err() == nil {
		fresh := s.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=hard-expired")
		if fresh.hard.IsZero() || s.clock.Now().Before(fresh.hard) {
			return fresh
		}
	}
	return readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=hard-expired", retryAfter: time.Second}
}

func (s *Server) respondRead(w http.ResponseWriter, id string, rr readResult) {
	h := w.Header()
	switch rr.kind {
	case readItem:
		// Age counts from the effective source observation; ttl (RFC 9211)
		// is what is left of the hard deadline, so a client can check that
		// Age + ttl never exceeds the promise.
		now := s.clock.Now()
		age := max(0, now.Sub(rr.effObs)/time.Second)
		writeItem(w, id, rr.version, rr.payload, strconv.FormatInt(int64(age), 10),
			rr.cacheStatus+"; ttl="+strconv.FormatInt(int64(max(0, rr.hard.Sub(now)/time.Second)), 10))
		return
	}
	h.Set("Cache-Status", rr.cacheStatus)
	switch rr.kind {
	case readNotFound:
		writeError(w, http.StatusNotFound, "not_found", "no such item")
	case readBelowMin:
		writeVersionError(w, http.StatusPreconditionFailed, "min_version_not_reached",
			"the item's current version is below min_version", id, rr.version)
	case readBadMinVersion:
		writeVersionError(w, http.StatusBadRequest, "min_version_out_of_range", rr.message, id, rr.version)
	default:
		secs := int64((rr.retryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(max(1, secs), 10))
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the catalog source is busy or unavailable; retry later")
	}
}

// resolve runs the read path: cache Lookup, then by its answer serve, wait,
// or read the source under the foreground budget and fill the lease.
func (s *Server) resolve(ctx context.Context, tenant, id string, minVersion int64) readResult {
	if !s.clock.Trusted() {
		// This host's clock is out of bounds (or not measured): its view of
		// deadlines cannot be trusted, so nothing is answered from or filled
		// into the cache.
		return s.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=clock")
	}
	key := tenant + "\x00" + id
	waited, floorChecked := false, false
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
		lctx, lcancel := context.WithTimeout(ctx, s.cfg.LookupTimeout)
		sent, sentWall := s.clock.Now(), s.clock.Wall()
		var lspan trace.Span
		if wait == nil {
			lspan = s.child(ctx, spanLookup) // the lookups inside a wait are the wait's
		}
		lr, err := s.cache.Lookup(lctx, tenant, id, minVersion)
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
			s.offerManifest(tenant, id, lr, sent)
		}
		if err == nil && lr.Status != cache.StatusWait {
			endWait()
		}
		if err != nil {
			if ctx.Err() != nil {
				return readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=timeout", retryAfter: time.Second}
			}
			// The cache tier is down: a bounded direct read (same budget and
			// in-flight cap), nothing filled.
			s.log.Debug("cache lookup failed; reading the source directly", "tenant", tenant, "item", id, "err", err)
			return s.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=cache-unavailable")
		}
		e := lr.Entry
		if minVersion > 0 && !floorChecked && !(lr.Status == cache.StatusHit && e.Version >= minVersion) {
			floorChecked = true
			if floor, beyond := s.beyondFloor(ctx, tenant, id, minVersion, e.Version); beyond {
				s.releaseLease(ctx, tenant, id, lr.Token)
				return s.minVersionTooHigh(floor)
			}
		}
		if (lr.Status == cache.StatusHit || lr.Status == cache.StatusStale) && !s.clock.Now().Before(e.Hard) {
			// Redis's clock still said yes; ours says the hard deadline has
			// passed. The deadline wins: read the source, fill nothing.
			s.releaseLease(ctx, tenant, id, lr.Token)
			return s.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=hard-expired")
		}
		switch lr.Status {
		case cache.StatusHit:
			if e.Version >= minVersion {
				s.l1.offer(key, e.Version, e.Payload, e.EffObs, e.Hard, sentWall, s.clock.Wall())
				st := "tidemark; hit"
				if waited {
					st += "; detail=waited"
				}
				return readResult{kind: readItem, version: e.Version, payload: e.Payload, effObs: e.EffObs, hard: e.Hard, cacheStatus: st}
			}
		case cache.StatusStale:
			if e.Stale {
				// Invalidated: a newer version is committed and applied. The old
				// value is a fallback for when the source cannot answer, never
				// the normal answer: the lease holder reads the source now, the
				// others wait for its fill while the request has time left.
				if !lr.Token.IsZero() {
					if rr := s.fetch(ctx, tenant, id, minVersion, lr.Token, "detail=invalidated"); rr.kind != readUnavailable {
						return rr
					}
				} else if dl, ok := ctx.Deadline(); ok && time.Until(dl) > staleFallbackReserve {
					waited = true
					if !sleepJitter(ctx) {
						continue
					}
				}
				if e.Version >= minVersion {
					return readResult{kind: readItem, version: e.Version, payload: e.Payload, effObs: e.EffObs, hard: e.Hard, cacheStatus: "tidemark; hit; detail=stale-invalidated"}
				}
				return readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=source-unavailable", retryAfter: time.Second}
			}
			if !lr.Token.IsZero() {
				s.refreshInBackground(tenant, id, lr.Token)
			}
			if e.Version >= minVersion {
				return readResult{kind: readItem, version: e.Version, payload: e.Payload, effObs: e.EffObs, hard: e.Hard, cacheStatus: "tidemark; hit; detail=stale"}
			}
		case cache.StatusNotFound:
			if minVersion == 0 {
				return readResult{kind: readNotFound, hard: e.Hard, cacheStatus: "tidemark; hit; detail=not-found"}
			}
			// A writer asking for its own write must not be told "absent" by
			// a negative entry older than the write: ask the source.
			return s.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=min-version")
		case cache.StatusMiss:
			return s.fetch(ctx, tenant, id, minVersion, lr.Token, "")
		case cache.StatusWait:
			waited = true
			if wait == nil {
				wait = s.child(ctx, spanLeaseWait)
			}
			if sleepJitter(ctx) {
				fail(wait, ctx.Err())
				return readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=lease-wait", retryAfter: time.Second}
			}
			continue
		}
		// A value below min_version that the cache still answered with: read
		// the source without a lease (nothing is filled).
		return s.fetch(ctx, tenant, id, minVersion, cache.Token{}, "detail=min-version")
	}
}

// releaseLease gives back a lease LOOKUP issued to a read that returns
// without filling, so the key's next reader misses at once instead of
// waiting out the lease (every early return of resolve that holds one).
func (s *Server) releaseLease(ctx context.Context, tenant, id string, tok cache.Token) {
	if tok.IsZero() {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	if _, err := s.cache.Release(fctx, tenant, id, tok); err != nil {
		s.log.Warn("lease release failed", "tenant", tenant, "item", id, "err", err) // it expires by itself
	}
}

// fetch reads the source under the foreground budget and, with a lease
// token, fills the cache with what it read.
func (s *Server) fetch(ctx context.Context, tenant, id string, minVersion int64, tok cache.Token, detail string) readResult {
	status := func(stored bool) string {
		st := "tidemark; fwd=miss"
		if stored {
			st += "; stored"
		}
		if detail != "" {
			st += "; " + detail
		}
		return st
	}
	class := classForeground
	if minVersion > 0 {
		class = classReadYourWrites
	}
	it, obs, err := s.sourceRead(ctx, class, tenant, id)
	if err != nil {
		// No fill will come: the lease goes back, so the key's next reader
		// (in any process) asks the budget at once instead of waiting out
		// the lease for nothing while the budget has room.
		s.releaseLease(ctx, tenant, id, tok)
		rr := readResult{kind: readUnavailable, cacheStatus: "tidemark; fwd=miss; detail=source-unavailable", retryAfter: time.Second}
		var be *budgetError
		if errors.As(err, &be) {
			rr.cacheStatus, rr.retryAfter = "tidemark; fwd=miss; detail=budget", be.RetryAfter
		}
		return rr
	}
	stored := false
	if !tok.IsZero() {
		// Only a plain miss (no detail) creates a key: admission applies
		// to it; refills of an existing key only obey the size cap.
		stored = s.fill(ctx, tenant, id, tok, it, obs, detail == "")
	}
	hard := obs.Add(s.hardLifetime)
	switch {
	case it.Found && it.Version < minVersion:
		s.belowMin.remember(tenant+"\x00"+id, it.Version, s.clock.Wall())
		return readResult{kind: readBelowMin, version: it.Version, hard: hard, cacheStatus: status(stored), fwd: true}
	case !it.Found || it.Deleted:
		// version: a tombstone's, for the shadow comparison (0: no row).
		return readResult{kind: readNotFound, version: it.Version, hard: hard, cacheStatus: status(stored), fwd: true}
	}
	return readResult{kind: readItem, version: it.Version, payload: it.Display, effObs: obs, hard: hard, cacheStatus: status(stored), fwd: true}
}

// sourceRead is one budgeted read of the source. obs is when it started:
// the value's age counts from there, never from when the answer arrived.
func (s *Server) sourceRead(ctx context.Context, class, tenant, id string) (sourceItem, time.Time, error) {
	if err := ctx.Err(); err != nil { // nobody waits for this read any more: spend no budget on it
		return sourceItem{}, time.Time{}, fmt.Errorf("api: source read: %w", err)
	}
	span := s.child(ctx, spanSource)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrClass, class), attribute.String("db.system.name", "postgresql"))
	}
	release, err := s.budget.acquire(ctx, class, tenant)
	if err != nil {
		fail(span, err)
		return sourceItem{}, time.Time{}, err
	}
	span.AddEvent("budget admitted")
	obs := s.clock.Wall()
	// Admitted reads run to their own statement timeout even if the caller
	// gives up: the budget is spent, and the fill still helps the next reader.
	it, err := s.src.read(context.WithoutCancel(ctx), class, tenant, id)
	release()
	switch {
	case err != nil && isTimeout(err):
		s.m.sourceReads.WithLabelValues(class, "timeout").Inc()
	case err != nil:
		s.m.sourceReads.WithLabelValues(class, "error").Inc()
	case !it.Found || it.Deleted:
		s.m.sourceReads.WithLabelValues(class, "not_found").Inc()
	default:
		s.m.sourceReads.WithLabelValues(class, "found").Inc()
	}
	if err != nil {
		fail(span, err)
		s.log.Warn("source read failed", "class", class, "tenant", tenant, "item", id, "err", err)
		return sourceItem{}, time.Time{}, err
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("tidemark.found", it.Found && !it.Deleted), attribute.Int64(attrVersion, it.Version))
	}
	if s.afterSourceRead != nil {
		s.afterSourceRead(tenant, id, it)
	}
	return it, obs, nil
}

// fill installs a source read under its lease. A rejection is normal (an
// invalidation overtook the read); it only means nothing was stored. A value
// over MaxValueBytes, or a new key the tenant's fill share does not admit
// (admission.go), is not cached: the lease is released so the key's next
// reader misses at once instead of waiting for a fill that never comes.
func (s *Server) fill(ctx context.Context, tenant, id string, tok cache.Token, it sourceItem, obs time.Time, newKey bool) (stored bool) {
	span := s.child(ctx, spanFill)
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
	case s.cfg.MaxValueBytes > 0 && int64(len(it.Display)) > s.cfg.MaxValueBytes:
		skip = skipTooLarge
	case newKey && !s.admit.admit(tenant, id, s.clock.Wall()):
		skip = skipAdmission
	}
	if skip != "" {
		span.AddEvent("skipped: " + skip)
		s.m.fillsSkipped.WithLabelValues(skip).Inc()
		if _, err := s.cache.Release(fctx, tenant, id, tok); err != nil {
			// The lease then expires by itself (readers wait at most its length).
			s.log.Warn("lease release failed", "tenant", tenant, "item", id, "err", err)
		}
		return false
	}
	var err error
	if it.Found && !it.Deleted {
		err = s.cache.Fill(fctx, tenant, id, tok, it.Version, it.Display, obs)
	} else {
		err = s.cache.FillNotFound(fctx, tenant, id, tok, obs)
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, cache.ErrRejected):
		span.AddEvent("rejected: an invalidation overtook the read")
		s.log.Debug("fill rejected", "tenant", tenant, "item", id, "version", it.Version, "err", err)
	default:
		fail(span, err)
		s.log.Warn("fill failed", "tenant", tenant, "item", id, "err", err)
	}
	return false
}

// refreshInBackground re-reads a stale value under the background budget; the
// caller already answered with the stale value.
func (s *Server) refreshInBackground(tenant, id string, tok cache.Token) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.refreshes.Do(tenant+"\x00"+id, func() (any, error) {
			ctx, cancel := context.WithTimeout(s.base, s.cfg.SourceTimeout+time.Second)
			defer cancel()
			it, obs, err := s.sourceRead(ctx, classBackground, tenant, id)
			if err != nil {
				return nil, nil // stays stale until its hard deadline; the lease expires
			}
			s.fill(ctx, tenant, id, tok, it, obs, false)
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
