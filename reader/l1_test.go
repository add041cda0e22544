package reader

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// L1 admits a key on its second hit, never serves past the entry's hard
// deadline or its own ttl, and never steps back to an older version.
func TestL1(t *testing.T) {
	c := newL1(500*time.Millisecond, 100)
	now := time.Now()
	hard := now.Add(200 * time.Millisecond)
	c.offer("k", 3, []byte("v3"), now, hard, now, now)
	if _, ok := c.get("k", 0, now); ok {
		t.Fatal("admitted on the first hit")
	}
	c.offer("k", 3, []byte("v3"), now, hard, now, now)
	if e, ok := c.get("k", 0, now.Add(100*time.Millisecond)); !ok || e.version != 3 {
		t.Fatal("not admitted on the second hit")
	}
	if _, ok := c.get("k", 4, now); ok {
		t.Fatal("served below min_version")
	}
	if _, ok := c.get("k", 0, hard); ok {
		t.Fatal("served at the hard deadline")
	}
	far := now.Add(time.Minute)
	c.offer("k", 5, []byte("v5"), now, far, now, now)
	c.offer("k", 4, []byte("v4"), now, far, now, now)
	if e, _ := c.get("k", 0, now); e.version != 5 {
		t.Fatalf("version went back to %d", e.version)
	}
	if _, ok := c.get("k", 0, now.Add(500*time.Millisecond)); ok {
		t.Fatal("served past the L1 ttl")
	}
	for i := range 1000 { // bounded
		k := string(rune('a'+i%26)) + string(rune(i))
		c.offer(k, 1, nil, now, far, now, now)
		c.offer(k, 1, nil, now, far, now, now)
	}
	if len(c.entries) > 100 || len(c.seen) > 100 {
		t.Fatalf("L1 grew to %d entries, %d seen", len(c.entries), len(c.seen))
	}
}

// TestL1WindowStartsAtLookup: L1's window counts from when the lookup that
// found the entry was sent, not from when the answer arrived. The admitting
// lookup is held in Redis (CLIENT PAUSE): held well within the window, the
// entry expires one window after the read was sent, not one window after
// the slow answer; held past the window, it has passed when the answer
// comes, and the entry is not admitted at all. The window is 2 s here, not
// the product's 500ms, so a busy machine's own delays stay small beside it.
func TestL1WindowStartsAtLookup(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := testenv.Context(t, 60*time.Second)
	src := SourceFunc(func(context.Context, string, string) (Item, error) {
		return Item{Found: true, Version: 1, Payload: []byte(`{"name":"X"}`)}, nil
	})
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.LookupTimeout, c.RequestTimeout = 10*time.Second, 10*time.Second },
		func(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second })
	const window = 2 * time.Second
	rd.l1 = newL1(window, 100)
	admit := func(item string, pause time.Duration) (l1Entry, bool, time.Time, time.Duration) {
		t.Helper()
		q := Query{Tenant: "acme", Item: item}
		rd.Get(ctx, q) // miss, filled
		if r := rd.Get(ctx, q); r.CacheStatus != "tidemark; hit" {
			t.Fatalf("first hit: %s", r.CacheStatus)
		}
		if err := rdb.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if r := rd.Get(ctx, q); r.CacheStatus != "tidemark; hit" {
			t.Fatalf("second hit (admits to L1): %s", r.CacheStatus)
		}
		answered := time.Since(before)
		if answered < pause-100*time.Millisecond {
			t.Fatalf("the lookup was answered after %s: the %s pause did not hold it", answered, pause)
		}
		rd.l1.mu.RLock()
		ent, ok := rd.l1.entries["acme\x00"+item]
		rd.l1.mu.RUnlock()
		return ent, ok, before, answered
	}

	ent, ok, before, answered := admit("x", 800*time.Millisecond)
	if !ok {
		t.Fatalf("a hit whose lookup took %s (within the %s window) was not admitted to L1", answered.Round(time.Millisecond), window)
	}
	if lim := before.Add(window + 300*time.Millisecond); ent.expires.After(lim) {
		t.Fatalf("L1 entry expires %s after the read was sent (answered after %s): the window must start at the lookup, so about %s",
			ent.expires.Sub(before).Round(time.Millisecond), answered.Round(time.Millisecond), window)
	}
	if ent, ok, before, answered := admit("y", window+300*time.Millisecond); ok {
		t.Fatalf("a hit whose lookup took %s (past the %s window) was admitted to L1, expiring %s after the read",
			answered.Round(time.Millisecond), window, ent.expires.Sub(before).Round(time.Millisecond))
	}
}
