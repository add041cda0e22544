package reader

import (
	"strconv"
	"sync"
	"time"
)

// Read-your-writes reads (min_version) are bounded two ways, so a client
// cannot turn them into a stream of source reads: they are metered in their
// own budget class with a fair share per tenant; and a source read that
// found the item below min_version is remembered for MinVersionMemo, so
// repeats are answered BelowMin without reading the source again. A
// min_version further above the source's version than MinVersionSlack is
// answered BadMinVersion instead of BelowMin (no write can produce it soon). A write through this process forgets the
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

// beyondSlack reports whether minVersion is more than MinVersionSlack above
// version, the item's version at the source. Only the source can say so: a
// floor or a cached entry lags the source by the invalidations in flight,
// and an adopted table's versions may jump (a timestamp, a sequence shared
// by many rows), so refusing on the floor's word would refuse a writer its
// own write.
func (rd *Reader) beyondSlack(minVersion, version int64) bool {
	return minVersion-version > rd.cfg.MinVersionSlack
}

// minVersionTooHigh is the refusal; cacheStatus carries no detail of its
// own, so the answer names one reason.
func (rd *Reader) minVersionTooHigh(version int64, cacheStatus string) Result {
	return Result{Kind: BadMinVersion, Version: version, CacheStatus: cacheStatus + "; detail=min-version-beyond-source",
		Message: "min_version is more than " + strconv.FormatInt(rd.cfg.MinVersionSlack, 10) +
			" versions above the item's version at the source; use a version a write returned"}
}
