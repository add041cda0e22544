package reader

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// The source down (failing at once, as a stopped Postgres does; api's
// TestPostgresDownIs503NotFound shows the Postgres source fails so): the
// cached value is served (stale) until its hard deadline, then Unavailable
// with a RetryAfter; never NotFound.
func TestSourceDownStaleThenUnavailable(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "p", 1, `"v"`)
	const hard = 2 * time.Second
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.LookupTimeout, c.RequestTimeout = 3*time.Second, 3*time.Second }, func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime, c.Lease, c.NegativeTTL = 200*time.Millisecond, 300*time.Millisecond, hard, 300*time.Millisecond, time.Second
	})
	p := Query{Tenant: "acme", Item: "p"}
	t0 := time.Now()
	if r := getAdmitted(t, rd, p); r.Kind != Found {
		t.Fatalf("Get: %d %q", r.Kind, r.CacheStatus)
	}
	t1 := time.Now()
	src.fail(true)

	var served, unavailable int
	tick := time.NewTicker(50 * time.Millisecond) // paces the reads: the loop ends at a time, not on an event
	defer tick.Stop()
	for time.Since(t1) < hard+1500*time.Millisecond {
		sent := time.Now()
		r := rd.Get(t.Context(), p)
		switch r.Kind {
		case Found:
			if sent.After(t1.Add(hard)) {
				t.Fatalf("served at %s after the fill, past the hard deadline %s: %q", sent.Sub(t0), hard, r.CacheStatus)
			}
			served++
		case Unavailable:
			if sent.Before(t0.Add(hard - 300*time.Millisecond)) {
				t.Fatalf("Unavailable at %s, before the hard deadline: %q", sent.Sub(t0), r.CacheStatus)
			}
			if r.RetryAfter <= 0 {
				t.Fatalf("Unavailable without a RetryAfter: %q", r.CacheStatus)
			}
			unavailable++
		default:
			t.Fatalf("Get during the outage: %d %q", r.Kind, r.CacheStatus)
		}
		<-tick.C
	}
	if served == 0 || unavailable == 0 {
		t.Fatalf("served %d, unavailable %d: want both", served, unavailable)
	}
	if r := rd.Get(t.Context(), Query{Tenant: "acme", Item: "never-existed"}); r.Kind != Unavailable {
		t.Fatalf("unknown item during the outage: %d %q, want Unavailable (not NotFound)", r.Kind, r.CacheStatus)
	}
}

// An invalidated value is not served while the source can answer: the read
// after an applied invalidation returns the new version. It is served (marked
// stale-invalidated) only when the source cannot answer, within its hard
// deadline.
func TestInvalidatedValueServedOnlyAsFallback(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "i", 1, `"one"`)
	// The budget is not what this tests: a fresh one admits a read every
	// 1 µs after its first, so the read after the invalidation is never
	// refused (a refusal would answer the invalidated value as a fallback).
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size, c.ForegroundRate = 0, 1e6 },
		func(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second })
	applier, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	i := Query{Tenant: "acme", Item: "i"}
	if r := getAdmitted(t, rd, i); r.Kind != Found || r.Version != 1 {
		t.Fatalf("first Get: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}

	// v2 committed and its invalidation applied (the applier's part).
	src.set("acme", "i", 2, `"two"`)
	if _, err := applier.Invalidate(ctx, "acme", "i", 2); err != nil {
		t.Fatal(err)
	}
	if r := rd.Get(ctx, i); r.Kind != Found || r.Version != 2 {
		t.Fatalf("Get after the invalidation: %d version %d %q, want v2", r.Kind, r.Version, r.CacheStatus)
	}

	// v3 committed and invalidated while the source is down: the v2 value,
	// within its hard deadline, is the best answer there is.
	src.set("acme", "i", 3, `"three"`)
	if _, err := applier.Invalidate(ctx, "acme", "i", 3); err != nil {
		t.Fatal(err)
	}
	src.fail(true)
	start := time.Now()
	r := rd.Get(ctx, i)
	if r.Kind != Found || r.Version != 2 || r.CacheStatus != "tidemark; hit; detail=stale-invalidated" {
		t.Fatalf("Get with the source down: %d version %d %q, want the invalidated v2 as a fallback", r.Kind, r.Version, r.CacheStatus)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("fallback took %s", d)
	}
}
