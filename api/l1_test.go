package api

import (
	"testing"
	"time"
)

// L1 admits a key on its second hit, never serves past the entry's hard
// deadline or its own ttl, and never steps back to an older version.
func TestL1(t *testing.T) {
	c := newL1(500*time.Millisecond, 100)
	now := time.Now()
	hard := now.Add(200 * time.Millisecond)
	c.offer("k", 3, []byte("v3"), now, hard, now)
	if _, ok := c.get("k", 0, now); ok {
		t.Fatal("admitted on the first hit")
	}
	c.offer("k", 3, []byte("v3"), now, hard, now)
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
	c.offer("k", 5, []byte("v5"), now, far, now)
	c.offer("k", 4, []byte("v4"), now, far, now)
	if e, _ := c.get("k", 0, now); e.version != 5 {
		t.Fatalf("version went back to %d", e.version)
	}
	if _, ok := c.get("k", 0, now.Add(500*time.Millisecond)); ok {
		t.Fatal("served past the L1 ttl")
	}
	for i := range 1000 { // bounded
		k := string(rune('a'+i%26)) + string(rune(i))
		c.offer(k, 1, nil, now, far, now)
		c.offer(k, 1, nil, now, far, now)
	}
	if len(c.entries) > 100 || len(c.seen) > 100 {
		t.Fatalf("L1 grew to %d entries, %d seen", len(c.entries), len(c.seen))
	}
}
