package api

import (
	"hash/maphash"
	"sync"
	"time"
)

// Reasons a source read under a lease is answered but not cached
// (tidemark_api_fills_skipped_total{reason}).
const (
	skipTooLarge  = "too_large" // the value is over MaxValueBytes
	skipAdmission = "admission" // first miss of a tenant over its fill share
)

// admissionWindow is how long the doorkeeper remembers a tenant's miss of a
// key: a second miss within one to two windows is cached.
const admissionWindow = 10 * time.Second

// doorkeeperBits is the size of one doorkeeper generation (a Bloom filter
// of 2 hashes): 8 KiB, under 2 % false admissions at 5,000 misses a window.
const doorkeeperBits = 1 << 16

// admission decides which fills of new keys reach the cache, so one tenant
// scanning cold ids cannot evict the others' hot entries. Each tenant has a
// fair share of this process's fill rate (FillRate / tenants filling in the
// last second, as the source budget shares its rate). Within its share a
// tenant's misses are cached at once; above it, only a key the tenant
// already missed within the admission window is (second-hit admission).
// Memory is bounded per tenant (two doorkeeper generations and a bucket);
// tenants idle for two windows are forgotten.
type admission struct {
	rate    float64 // fills/s of this process shared by active tenants; 0: every fill admitted
	seed    maphash.Seed
	mu      sync.Mutex
	tenants map[string]*tenantFills
}

type tenantFills struct {
	tokens    float64   // fills the tenant may still make within its share
	refilled  time.Time // when tokens were last topped up
	lastMiss  time.Time // for the active-tenant count
	cur, prev []uint64  // doorkeeper generations
	rotated   time.Time
}

func newAdmission(rate float64) *admission {
	return &admission{rate: rate, seed: maphash.MakeSeed(), tenants: make(map[string]*tenantFills)}
}

// admit reports whether the fill of a missed key is cached.
func (a *admission) admit(tenant, id string, now time.Time) bool {
	if a.rate <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	tf := a.tenants[tenant]
	if tf == nil {
		// A new tenant starts with a full second of its share.
		tf = &tenantFills{tokens: a.rate, refilled: now, rotated: now, cur: make([]uint64, doorkeeperBits/64), prev: make([]uint64, doorkeeperBits/64)}
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
	share := a.rate / float64(max(1, active))
	// A second of the share as burst (at least one fill).
	tf.tokens = min(max(1, share), tf.tokens+now.Sub(tf.refilled).Seconds()*share)
	tf.refilled = now
	if tf.tokens >= 1 {
		tf.tokens--
		return true
	}
	if d := now.Sub(tf.rotated); d >= admissionWindow {
		tf.cur, tf.prev = tf.prev, tf.cur
		clear(tf.cur)
		if d >= 2*admissionWindow {
			clear(tf.prev)
		}
		tf.rotated = now
	}
	h := maphash.String(a.seed, id)
	b1, b2 := h%doorkeeperBits, (h>>32)%doorkeeperBits
	has := func(f []uint64) bool { return f[b1/64]&(1<<(b1%64)) != 0 && f[b2/64]&(1<<(b2%64)) != 0 }
	if has(tf.cur) || has(tf.prev) {
		return true
	}
	tf.cur[b1/64] |= 1 << (b1 % 64)
	tf.cur[b2/64] |= 1 << (b2 % 64)
	return false
}
