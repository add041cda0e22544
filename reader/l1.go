package reader

import (
	"sync"
	"time"
)

// l1 is the in-process hot-key cache in front of Redis. A key is admitted
// only on its second cache hit since the doorkeeper was last cleared, so a
// scan of cold keys cannot flush the hot set. An entry lives at most ttl and
// never past the hard deadline the cache tier computed for it: L1 never
// extends a value's life.
type l1 struct {
	ttl  time.Duration
	size int

	mu      sync.RWMutex
	entries map[string]l1Entry
	seen    map[string]struct{}
}

type l1Entry struct {
	version int64
	payload []byte
	effObs  time.Time
	hard    time.Time
	expires time.Time // min(lookup sent + ttl, hard)
}

func newL1(ttl time.Duration, size int) *l1 {
	return &l1{ttl: ttl, size: size, entries: make(map[string]l1Entry), seen: make(map[string]struct{})}
}

func (c *l1) enabled() bool { return c.size > 0 && c.ttl > 0 }

// get returns a live entry of at least minVersion.
func (c *l1) get(key string, minVersion int64, now time.Time) (l1Entry, bool) {
	if !c.enabled() {
		return l1Entry{}, false
	}
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || !now.Before(e.expires) || e.version < minVersion {
		return l1Entry{}, false
	}
	return e, true
}

// offer records a cache hit and admits the value if the key is hot. sent
// is when the lookup that found it was sent: the window counts from there,
// not from now, so a slow lookup does not lengthen it (the cache tier's
// answer is only known to be current as of the lookup).
func (c *l1) offer(key string, version int64, payload []byte, effObs, hard, sent, now time.Time) {
	if !c.enabled() {
		return
	}
	expires := sent.Add(c.ttl)
	if hard.Before(expires) {
		expires = hard
	}
	if !now.Before(expires) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, hot := c.seen[key]; !hot {
		if len(c.seen) >= c.size {
			clear(c.seen)
		}
		c.seen[key] = struct{}{}
		return
	}
	if old, ok := c.entries[key]; ok && old.version > version {
		return // never step a key back to an older version
	}
	if len(c.entries) >= c.size {
		c.evict(now)
	}
	c.entries[key] = l1Entry{version: version, payload: payload, effObs: effObs, hard: hard, expires: expires}
}

// evict drops expired entries, or a few arbitrary ones when none expired
// (map iteration order is random enough for a 0.5 s cache).
func (c *l1) evict(now time.Time) {
	n := 0
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
			n++
		}
	}
	for k := range c.entries {
		if n >= c.size/16+1 {
			break
		}
		delete(c.entries, k)
		n++
	}
}
