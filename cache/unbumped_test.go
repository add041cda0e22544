package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// A change whose version is not above the floor (a write that did not raise
// the version: replica-role writes, a trigger sorting after the version
// trigger) still revokes what was observed before it: the value extended by
// the watermark is stale at once, and a lease taken before the change cannot
// fill. A value observed after it is left alone by nothing but the next
// change: the event is applied after the change is visible.
func TestChangeNotAboveTheFloorRevokes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx, tn := context.Background(), tenant(t)
		c := newClient(t, b, extensionConfig("catalog"))
		runPoller(t, c)
		advanceWatermark(t, c, 2, 0)
		obs := fillFresh(t, c, tn)
		// Extended by W: a hit past its own soft deadline.
		time.Sleep(time.Until(obs.Add(1100 * time.Millisecond)))
		if r := lookup(t, c, tn, "item", 0); r.Status != cache.StatusHit || r.Entry.Version != 5 {
			t.Fatalf("lookup before the change = %s v%d, want an extended hit of v5", r.Status, r.Entry.Version)
		}
		// The write kept version 5.
		if res, err := c.Invalidate(ctx, tn, "item", 5); err != nil || res != cache.InvalidateRevoked {
			t.Fatalf("invalidate v5 over a cached v5 = %s, %v; want %s", res, err, cache.InvalidateRevoked)
		}
		r := lookup(t, c, tn, "item", 0)
		if r.Status == cache.StatusHit || !r.Entry.Stale {
			t.Fatalf("lookup after an equal-version change = %s (stale %v), want stale: the old value would be vouched for by W",
				r.Status, r.Entry.Stale)
		}
		// The refresh's lease was taken before the next unbumped change: it
		// cannot fill what it read.
		if res, _ := c.Invalidate(ctx, tn, "item", 5); res != cache.InvalidateRevoked {
			t.Fatalf("second equal-version change with a lease out = %s, want %s", res, cache.InvalidateRevoked)
		}
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 5, payload(5), obs), cache.ReasonToken)
		// A read after the change fills and is a hit again; a duplicate of
		// nothing (no value, no lease) changes nothing.
		mustFill(t, c, tn, "item", acquire(t, c, tn, "item").Token, 5, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != cache.StatusHit {
			t.Fatalf("lookup after the refill = %s, want hit", r.Status)
		}
		if res, _ := c.Invalidate(ctx, tn, "never-read", 3); res != cache.InvalidateApplied {
			t.Fatalf("first invalidate = %s", res)
		}
		if res, _ := c.Invalidate(ctx, tn, "never-read", 3); res != cache.InvalidateDuplicate {
			t.Fatalf("duplicate on a key without value or lease = %s, want duplicate", res)
		}
	})
}
