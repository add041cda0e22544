package cache_test

import (
	"context"
	"testing"
	"time"
)

// The seed's ten interleavings (seed 000), each against standalone Redis and
// a 3-master Cluster.

// (1) A reader gets a token and reads v41; the v42 invalidation lands; the
// reader's fill of v41 is rejected, and so is v41 with any later token.
func TestFillAfterInvalidationRejected(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		r := lookup(t, c, tn, "item", 0)
		mustStatus(t, r, "miss", true)
		obs := time.Now() // the reader's source read of v41 starts here
		if res, err := c.Invalidate(ctx, tn, "item", 42); err != nil || res != "applied" {
			t.Fatalf("invalidate v42 = %v, %v", res, err)
		}
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 41, payload(41), obs), "token")
		// A new token does not help a v41 read: the floor is 42.
		r2 := lookup(t, c, tn, "item", 0)
		mustStatus(t, r2, "miss", true)
		mustReject(t, c.Fill(ctx, tn, "item", r2.Token, 41, payload(41), obs), "version")
		if h := hash(t, b, "catalog", tn, "item"); h["floor"] != "42" || h["v"] != "" {
			t.Fatalf("hash after rejected fills = %v", h)
		}
		mustFill(t, c, tn, "item", r2.Token, 42, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 42 {
			t.Fatalf("lookup after fill = %+v", r)
		}

		// Same with a cached value: v41 cached, a reader refreshing it
		// holds a token when v42 lands; its v41 fill is rejected.
		mustFill(t, c, tn, "other", lookup(t, c, tn, "other", 0).Token, 41, time.Now())
		r3 := lookup(t, c, tn, "other", 42) // min_version forces a new read
		mustStatus(t, r3, "miss", true)
		if res, _ := c.Invalidate(ctx, tn, "other", 42); res != "applied" {
			t.Fatalf("invalidate = %v", res)
		}
		mustReject(t, c.Fill(ctx, tn, "other", r3.Token, 41, payload(41), time.Now()), "token")
		s := lookup(t, c, tn, "other", 0)
		if s.Status != "stale" || s.Entry.Version != 41 || !s.Entry.Stale {
			t.Fatalf("lookup of invalidated v41 = %+v, want stale", s)
		}
	})
}

// (2) Out-of-order and duplicate invalidations: v43 then v42 (and v43
// again) leave the floor at 43 and say what they did.
func TestOutOfOrderAndDuplicateInvalidations(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		for _, step := range []struct {
			v    int64
			want string
		}{{43, "applied"}, {42, "older"}, {43, "duplicate"}, {41, "older"}} {
			res, err := c.Invalidate(ctx, tn, "item", step.v)
			if err != nil || string(res) != step.want {
				t.Fatalf("invalidate v%d = %v, %v; want %s", step.v, res, err, step.want)
			}
		}
		h := hash(t, b, "catalog", tn, "item")
		if h["floor"] != "43" || h["gen"] != "1" {
			t.Fatalf("hash = %v, want floor 43, gen 1", h)
		}
		r := lookup(t, c, tn, "item", 0)
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 42, payload(42), time.Now()), "version")
		mustFill(t, c, tn, "item", r.Token, 43, time.Now())
		// An older event after the fill changes nothing: still a hit.
		if res, _ := c.Invalidate(ctx, tn, "item", 42); res != "older" {
			t.Fatalf("late v42 = %v", res)
		}
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 43 {
			t.Fatalf("lookup = %+v", r)
		}
		if h := hash(t, b, "catalog", tn, "item"); h["floor"] != "43" || h["gen"] != "1" || h["stale"] != "" {
			t.Fatalf("hash after late event = %v", h)
		}
	})
}

// (3) Lease expiry: a holder that stalls past the lease loses; a new caller
// gets a new token and fills.
func TestLeaseExpiryTakeover(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		a := lookup(t, c, tn, "item", 0)
		mustStatus(t, a, "miss", true)
		mustStatus(t, lookup(t, c, tn, "item", 0), "wait", false)
		time.Sleep(cfg.Lease + 50*time.Millisecond) // the holder stalls
		bb := lookup(t, c, tn, "item", 0)
		mustStatus(t, bb, "miss", true)
		if bb.Token == a.Token {
			t.Fatal("takeover reused the stalled token")
		}
		mustReject(t, c.Fill(ctx, tn, "item", a.Token, 7, payload(7), time.Now()), "token")
		mustFill(t, c, tn, "item", bb.Token, 7, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 7 {
			t.Fatalf("lookup = %+v", r)
		}
	})
}
