package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// A released lease is gone at once: the next reader misses and gets a lease
// (not "wait" for a fill that never comes). A stale token, or one released
// twice, releases nothing and never takes the newer holder's lease; the
// newer holder still fills.
func TestReleaseGivesTheLeaseBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		r := lookup(t, c, tn, "k", 0)
		mustStatus(t, r, "miss", true)
		mustStatus(t, lookup(t, c, tn, "k", 0), "wait", false)
		if ok, err := c.Release(ctx, tn, "k", r.Token); err != nil || !ok {
			t.Fatalf("release of the key's lease = %v, %v; want true", ok, err)
		}
		if h := hash(t, b, "catalog", tn, "k"); len(h) != 0 {
			t.Fatalf("a released miss left %v", h)
		}
		r2 := lookup(t, c, tn, "k", 0)
		mustStatus(t, r2, "miss", true)
		if ok, err := c.Release(ctx, tn, "k", r.Token); err != nil || ok {
			t.Fatalf("release of an old token = %v, %v; want false", ok, err)
		}
		if ok, err := c.Release(ctx, tn, "k", cache.Token{}); err != nil || ok {
			t.Fatalf("release of no token = %v, %v; want false", ok, err)
		}
		mustFill(t, c, tn, "k", r2.Token, 3, time.Now())
		mustStatus(t, lookup(t, c, tn, "k", 0), "hit", false)
		// A release after the fill (the lease was used) changes nothing.
		if ok, err := c.Release(ctx, tn, "k", r2.Token); err != nil || ok {
			t.Fatalf("release after the fill = %v, %v; want false", ok, err)
		}
		if h := hash(t, b, "catalog", tn, "k"); h["v"] != "3" || h["floor"] != "3" {
			t.Fatalf("hash after a late release = %v", h)
		}
	})
}
