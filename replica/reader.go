package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
)

// ReplicaReader is the part of *cache.Client a Reader uses.
type ReplicaReader interface {
	ReadReplica(ctx context.Context, tenant, item string, m cache.Manifest, i int) (cache.Entry, error)
}

// Reader serves reads of hot keys from their copies. It holds each
// manifest a lookup handed out for at most ManifestTTL from when that
// lookup was sent (never past the set's deadline); with no held manifest the
// caller reads the primary as usual. Safe for concurrent use.
type Reader struct {
	c   ReplicaReader
	ttl time.Duration
	now func() time.Time
	m   *metrics

	mu   sync.RWMutex
	held map[string]heldManifest
	// nHeld is len(held), kept under mu and read without it: every GET that
	// misses L1 asks the Reader, and almost always nothing is held (only hot
	// keys have copies), so that answer costs one atomic load, no lock and
	// no key built.
	nHeld atomic.Int64
}

type heldManifest struct {
	m     cache.Manifest
	sent  time.Time // when the lookup that gave it was sent
	until time.Time
}

// maxHeld bounds the manifests held: only hot keys have one.
const maxHeld = 4096

// NewReader builds a Reader keeping manifests for ttl (0: never held, so
// every read goes to the primary). now is the clock deadlines are checked
// against (nil: time.Now); the API passes its Redis-synchronised clock.
func NewReader(c ReplicaReader, ttl time.Duration, now func() time.Time, reg prometheus.Registerer) (*Reader, error) {
	if now == nil {
		now = time.Now
	}
	if c == nil {
		return nil, errors.New("replica: nil cache client")
	}
	if ttl < 0 || ttl > MaxManifestTTL {
		return nil, fmt.Errorf("replica: ManifestTTL must be between 0 and %s, got %s", MaxManifestTTL, ttl)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("replica: metrics: %w", err)
	}
	return &Reader{c: c, ttl: ttl, now: now, m: m, held: make(map[string]heldManifest)}, nil
}

func heldKey(tenant, item string) string { return tenant + "\x00" + item }

// Offer records what a lookup of (tenant, item) sent at sent said about
// replicas: m is its manifest, nil when it had none (the manifest was
// revoked or retired, or the answer was not a hit), which drops a held one.
func (r *Reader) Offer(tenant, item string, m *cache.Manifest, sent time.Time) {
	if m == nil || r.ttl == 0 {
		// Every lookup of every key comes here: only a key that holds a
		// manifest takes the write lock.
		if r.nHeld.Load() == 0 {
			return
		}
		k := heldKey(tenant, item)
		r.mu.RLock()
		_, ok := r.held[k]
		r.mu.RUnlock()
		if ok {
			r.drop(k, nil)
		}
		return
	}
	k := heldKey(tenant, item)
	until := sent.Add(r.ttl)
	if m.Soft.Before(until) {
		until = m.Soft
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.held[k]; ok && old.m.Version > m.Version {
		return // never step back to an older version
	}
	if len(r.held) >= maxHeld {
		for k, h := range r.held {
			if !sent.Before(h.until) {
				delete(r.held, k)
			}
		}
		r.nHeld.Store(int64(len(r.held)))
		if len(r.held) >= maxHeld {
			return
		}
	}
	r.held[k] = heldManifest{m: *m, sent: sent, until: until}
	r.nHeld.Store(int64(len(r.held)))
}

// drop forgets k's manifest; with set non-nil only while it is still that
// copy set (a newer one offered meanwhile stays).
func (r *Reader) drop(k string, set *string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.held[k]; ok && (set == nil || cur.m.Set == *set) {
		delete(r.held, k)
		r.nHeld.Store(int64(len(r.held)))
	}
}

// Holds reports whether a manifest of (tenant, item) is held and not yet
// past its use-by time: a read of it would try a copy first (ReadSent).
func (r *Reader) Holds(tenant, item string) bool {
	if r.nHeld.Load() == 0 {
		return false
	}
	r.mu.RLock()
	h, ok := r.held[heldKey(tenant, item)]
	r.mu.RUnlock()
	return ok && r.now().Before(h.until)
}

// Read answers from a copy when a manifest of at least minVersion is held:
// copy (reader mod N) first, the next one on retry. ok is false when the
// caller must read the primary; a copy found missing, mismatched or expired
// also drops the manifest so the next read asks the primary for a new one.
// Nothing is answered at or after the copy's soft deadline by the Reader's
// clock, checked after the copy arrived.
func (r *Reader) Read(ctx context.Context, tenant, item string, minVersion int64, reader uint64) (cache.Entry, bool) {
	e, _, ok := r.ReadSent(ctx, tenant, item, minVersion, reader)
	return e, ok
}

// ReadSent is Read, also saying when the lookup that gave the manifest was
// sent (by the Reader's clock): an answer kept in memory (L1) counts its
// lifetime from there, as the manifest does.
func (r *Reader) ReadSent(ctx context.Context, tenant, item string, minVersion int64, reader uint64) (cache.Entry, time.Time, bool) {
	if r.nHeld.Load() == 0 {
		return cache.Entry{}, time.Time{}, false
	}
	k := heldKey(tenant, item)
	now := r.now()
	r.mu.RLock()
	h, ok := r.held[k]
	r.mu.RUnlock()
	if !ok || !now.Before(h.until) || h.m.Version < minVersion || h.m.N() == 0 {
		return cache.Entry{}, time.Time{}, false
	}
	n := uint64(h.m.N())
	for try := uint64(0); try < min(2, n); try++ {
		e, err := r.c.ReadReplica(ctx, tenant, item, h.m, int((reader+try)%n))
		if err == nil && e.Version == h.m.Version && r.now().Before(e.Soft) && !e.Soft.After(e.Hard) {
			r.m.reads.WithLabelValues("copy").Inc()
			return e, h.sent, true
		}
		if err != nil && !errors.Is(err, cache.ErrReplicaUnusable) {
			break // Redis trouble: the primary path has its own handling
		}
	}
	r.drop(k, &h.m.Set)
	r.m.reads.WithLabelValues("fallback").Inc()
	return cache.Entry{}, time.Time{}, false
}
