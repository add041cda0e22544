package reader

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a source read under a lease is answered but not cached
// (tidemark_<stage>_fills_skipped_total{reason}).
const (
	skipTooLarge  = "too_large" // the value is over MaxValueBytes
	skipAdmission = "admission" // first miss of a tenant over its fill share
)

// admissionWindow is how long the doorkeeper remembers a tenant's miss of a
// key: a second miss within one to two windows is cached. It is also how
// long a tenant that went over its share stays on second-hit admission.
const admissionWindow = 10 * time.Second

// The doorkeeper is two generations of a Bloom filter of doorkeeperHashes
// hashes over doorkeeperBits bits (8 KiB). A generation also ends after
// doorkeeperFill misses, so it never fills up: a scan of 100,000 cold ids
// once had 3.4 % of its ids admitted as false second hits by an overfull
// 2-hash filter. At doorkeeperFill misses a generation answers a false
// "seen" for under 0.1 % of keys, so a scan leaks under 0.2 % (both
// generations are asked). A scanning tenant's memory of its misses is then
// shorter (4,096 misses), which only a scan needs: a key it really reads
// twice is read again soon.
const (
	doorkeeperBits   = 1 << 16
	doorkeeperHashes = 6
	doorkeeperFill   = doorkeeperBits / 16
)

// admission decides which fills of new keys reach the cache, so one tenant
// scanning cold ids cannot evict the others' hot entries. Each tenant has a
// fair share of this process's fill rate (FillRate / tenants filling in the
// last second, as the source budget shares its rate). Within its share a
// tenant's misses are cached at once; once it goes over, and for an
// admission window after the last time it did, only a key the tenant already
// missed within the window is (second-hit admission): a scanner gets no
// share of unconditional fills, which would otherwise let a steady trickle
// of cold ids evict the others' entries.
// Memory is bounded per tenant (two doorkeeper generations and a bucket);
// tenants idle for two windows are forgotten.
type admission struct {
	rate float64 // fills/s of this process shared by active tenants; 0: every fill admitted
	// limit (float64 bits) is the rate sized to the cache (admission_size.go);
	// 0: none known, rate alone.
	limit   atomic.Uint64
	seed    maphash.Seed
	mu      sync.Mutex
	tenants map[string]*tenantFills
}

type tenantFills struct {
	tokens    float64   // fills the tenant may still make within its share
	refilled  time.Time // when tokens were last topped up
	lastMiss  time.Time // for the active-tenant count
	overUntil time.Time // on second-hit admission until then
	cur, prev []uint64  // doorkeeper generations
	inserted  int       // misses recorded in cur
	rotated   time.Time
}

func newAdmission(rate float64) *admission {
	return &admission{rate: rate, seed: maphash.MakeSeed(), tenants: make(map[string]*tenantFills)}
}

// effective is the rate in force: rate, or the cache-sized limit when lower
// (0: admission off).
func (a *admission) effective() float64 {
	if l := math.Float64frombits(a.limit.Load()); a.rate > 0 && l > 0 {
		return min(a.rate, l)
	}
	return a.rate
}

func (a *admission) setLimit(l float64) { a.limit.Store(math.Float64bits(l)) }

// admit reports whether the fill of a missed key is cached.
func (a *admission) admit(tenant, id string, now time.Time) bool {
	rate := a.effective()
	if rate <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	tf := a.tenants[tenant]
	if tf == nil {
		// A new tenant starts with a full second of its share.
		tf = &tenantFills{tokens: rate, refilled: now, rotated: now, cur: make([]uint64, doorkeeperBits/64), prev: make([]uint64, doorkeeperBits/64)}
		a.tenants[tenant] = tf
	}
	tf.lastMiss = now
	active := 0
	for t, o := range a.tenants {
		switch age := now.Sub(o.lastMiss); {
		case age <= tenantWindow:
			active++
		case age > 2*admissionWindow:
			delete(a.tenants, t)
		}
	}
	share := rate / float64(max(1, active))
	// A second of the share as burst (at least one fill).
	tf.tokens = min(max(1, share), tf.tokens+now.Sub(tf.refilled).Seconds()*share)
	tf.refilled = now
	if now.After(tf.overUntil) && tf.tokens >= 1 {
		tf.tokens--
		return true
	}
	tf.overUntil = now.Add(admissionWindow)
	if d := now.Sub(tf.rotated); d >= admissionWindow || tf.inserted >= doorkeeperFill {
		tf.cur, tf.prev = tf.prev, tf.cur
		clear(tf.cur)
		if d >= 2*admissionWindow {
			clear(tf.prev)
		}
		tf.rotated, tf.inserted = now, 0
	}
	// Double hashing: bit i is h1 + i*h2 (h2 odd, so the bits differ).
	h := maphash.String(a.seed, id)
	h1, h2 := h&0xffffffff, h>>32|1
	has := func(f []uint64) bool {
		for i := range uint64(doorkeeperHashes) {
			b := (h1 + i*h2) % doorkeeperBits
			if f[b/64]&(1<<(b%64)) == 0 {
				return false
			}
		}
		return true
	}
	if has(tf.cur) || has(tf.prev) {
		return true
	}
	for i := range uint64(doorkeeperHashes) {
		b := (h1 + i*h2) % doorkeeperBits
		tf.cur[b/64] |= 1 << (b % 64)
	}
	tf.inserted++
	return false
}
