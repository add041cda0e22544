package reader

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Read-your-writes reads (min_version) are bounded three ways, so a client
// cannot turn them into a stream of source reads: they are metered in their
// own budget class with a fair share per tenant; a min_version further above
// the newest version the cache tier knows for the key (its floor, when one
// is stored) than MinVersionSlack is refused (BadMinVersion), since no write
// this deployment has seen can have produced it; and a source read that
// found the item below min_version is remembered for MinVersionMemo, so
// repeats are answered BelowMin without reading the source again. A write through this process forgets the
// key's memo at once; one through another process is seen when the memo ends.

// belowMinMemo remembers, per key, the version a source read found when it
// was below a reader's min_version.
type belowMinMemo struct {
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]memoEntry
}

type memoEntry struct {
	version int64
	until   time.Time
}

const memoMaxEntries = 100000

func newBelowMinMemo(ttl time.Duration) *belowMinMemo {
	return &belowMinMemo{ttl: ttl, entries: make(map[string]memoEntry)}
}

// below reports the remembered version when it proves the source is below
// minVersion.
func (m *belowMinMemo) below(key string, minVersion int64, now time.Time) (int64, bool) {
	if m.ttl <= 0 {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || !now.Before(e.until) || minVersion <= e.version {
		return 0, false
	}
	return e.version, true
}

func (m *belowMinMemo) remember(key string, version int64, now time.Time) {
	if m.ttl <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) >= memoMaxEntries {
		for k, e := range m.entries {
			if !now.Before(e.until) {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= memoMaxEntries {
			clear(m.entries)
		}
	}
	m.entries[key] = memoEntry{version: version, until: now.Add(m.ttl)}
}

func (m *belowMinMemo) forget(key string) {
	m.mu.Lock()
	delete(m.entries, key)
	m.mu.Unlock()
}

// beyondFloor reports whether minVersion is more than MinVersionSlack above
// the key's floor (known is a version the caller already saw, e.g. the
// cached one). Only a floor that is there can refuse: a floor is kept for
// FloorTTL and may be evicted or lost with a Redis restart, so a missing
// one (0) says nothing about the source and a long-lived item's own
// writer must still get its version; such reads go to the source in the
// read-your-writes class, whose budget and the below-min memo bound them.
// When the floor cannot be read, nothing is refused either.
func (rd *Reader) beyondFloor(ctx context.Context, tenant, id string, minVersion, known int64) (int64, bool) {
	if minVersion <= known+rd.cfg.MinVersionSlack {
		return 0, false
	}
	fctx, cancel := context.WithTimeout(ctx, rd.cfg.LookupTimeout)
	defer cancel()
	floor, err := rd.cache.Floor(fctx, tenant, id)
	if err != nil {
		return 0, false
	}
	floor = max(floor, known)
	if floor <= 0 {
		return 0, false
	}
	return floor, minVersion > floor+rd.cfg.MinVersionSlack
}

func (rd *Reader) minVersionTooHigh(floor int64) Result {
	return Result{Kind: BadMinVersion, Version: floor, CacheStatus: "tidemark; detail=min-version-beyond-floor",
		Message: "min_version is more than " + strconv.FormatInt(rd.cfg.MinVersionSlack, 10) +
			" versions above the newest version known for this item; use a version a write returned"}
}
