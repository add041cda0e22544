package api

import (
	"context"
	"testing"
	"time"
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

// TestL1WindowStartsAtLookup: L1's 0.5 s window counts from when the lookup
// that found the entry was sent, not from when the answer arrived. The
// admitting lookup is held in Redis (CLIENT PAUSE): held 400 ms, the entry
// expires about 0.5 s after the request, not 0.5 s after the slow answer;
// held 600 ms, its window has passed when the answer comes, and it is not
// admitted at all.
func TestL1WindowStartsAtLookup(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{ccfg: longSoft})
	key := e.apiKey("acme")
	rdb := e.redis.Client(t)
	admit := func(item string, pause time.Duration) (l1Entry, bool, time.Time, time.Duration) {
		t.Helper()
		if r := e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"`+item+`","display":{"name":"X"}}`); r.code != 201 {
			t.Fatalf("create: %d %s", r.code, r.raw)
		}
		e.do("GET", in.item(item), key, "") // miss, filled
		if r := e.do("GET", in.item(item), key, ""); r.cacheStatus() != "tidemark; hit" {
			t.Fatalf("first hit: %s", r.header.Get("Cache-Status"))
		}
		if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if r := e.do("GET", in.item(item), key, ""); r.cacheStatus() != "tidemark; hit" {
			t.Fatalf("second hit (admits to L1): %s", r.header.Get("Cache-Status"))
		}
		answered := time.Since(before)
		if answered < pause-100*time.Millisecond {
			t.Fatalf("the lookup was answered after %s: the %s pause did not hold it", answered, pause)
		}
		in.srv.l1.mu.RLock()
		ent, ok := in.srv.l1.entries["acme\x00"+item]
		in.srv.l1.mu.RUnlock()
		return ent, ok, before, answered
	}

	ent, ok, before, answered := admit("x", 400*time.Millisecond)
	if !ok {
		t.Fatalf("a hit whose lookup took %s (within the 500ms window) was not admitted to L1", answered)
	}
	if lim := before.Add(700 * time.Millisecond); ent.expires.After(lim) {
		t.Fatalf("L1 entry expires %s after the request was sent (answered after %s): the window must start at the lookup, so about 500ms",
			ent.expires.Sub(before).Round(time.Millisecond), answered.Round(time.Millisecond))
	}
	if ent, ok, before, answered := admit("y", 600*time.Millisecond); ok {
		t.Fatalf("a hit whose lookup took %s (past the 500ms window) was admitted to L1, expiring %s after the request",
			answered.Round(time.Millisecond), ent.expires.Sub(before).Round(time.Millisecond))
	}
}
