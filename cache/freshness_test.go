package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// advanceWatermark keeps every partition's watermark at now-lag until stop
// is called, like healthy appliers; stop returns the last value written.
func advanceWatermark(t *testing.T, c *cache.Client, partitions int, lag time.Duration) (stop func() time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := c.SetPartitions(ctx, partitions); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		last time.Time
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	set := func() {
		w := time.Now().Add(-lag)
		for p := 0; p < partitions; p++ {
			if err := c.SetWatermark(ctx, int32(p), w); err != nil {
				t.Error(err)
			}
		}
		mu.Lock()
		last = w
		mu.Unlock()
	}
	set()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(30 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				set()
			}
		}
	}()
	var once sync.Once
	stop = func() time.Time {
		once.Do(func() { close(done); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	t.Cleanup(func() { stop() })
	return stop
}

// runPoller runs c.Run for the test and waits for a first poll.
func runPoller(t *testing.T, c *cache.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testenv.Eventually(t, 5*time.Second, "first watermark poll", func() error {
		if c.Watermark().ReadAt.IsZero() {
			return fmt.Errorf("not polled yet")
		}
		return nil
	})
}

// extensionConfig has a wide soft window so a scheduling hiccup of the
// watermark writer does not turn a hit into a stale, and a MaxAge barely
// above the hard lifetime so that a physical TTL cutting an extended entry
// short would show.
func extensionConfig(ns string) cache.Config {
	cfg := testConfig()
	cfg.Namespace = ns
	cfg.SoftMin, cfg.SoftMax = 800*time.Millisecond, 1000*time.Millisecond
	cfg.FloorTTL = cfg.HardLifetime
	cfg.MaxAge = cfg.HardLifetime + cfg.Lease
	return cfg
}

// fillFresh fills item with v5 observed now.
func fillFresh(t *testing.T, c *cache.Client, tn string) time.Time {
	t.Helper()
	obs := time.Now()
	mustFill(t, c, tn, "item", acquire(t, c, tn, "item").Token, 5, obs)
	return time.UnixMilli(obs.UnixMilli())
}

// expectExpiry polls until the entry is no longer served, failing if it is
// served at or after hard, or still served well after it.
func expectExpiry(t *testing.T, c *cache.Client, tn string, hard time.Time) {
	t.Helper()
	for {
		before := time.Now()
		r := lookup(t, c, tn, "item", 0)
		served := r.Status == "hit" || r.Status == "stale"
		if served && !before.Before(hard) {
			t.Fatalf("served %s at %v, hard deadline %v", r.Status, before.Format(time.StampMilli), hard.Format(time.StampMilli))
		}
		// The script judges with Redis's clock when the request arrives, a
		// moment after before: a miss that close to the deadline is expiry.
		if !served && hard.Sub(before) < 50*time.Millisecond {
			return
		}
		if !served {
			t.Fatalf("not served (%s) %v before hard %v", r.Status, hard.Sub(before), hard.Format(time.StampMilli))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// While W advances, an unchanged entry stays a hit past obs + hard lifetime
// (and its key outlives MaxAge); when W stops it expires at W + hard
// lifetime. Invalidated entries, entries observed before reset_at, and an
// unknown W (a partition missing) get no extension.
func TestWatermarkExtension(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		t.Run("extends while W advances", func(t *testing.T) {
			t.Parallel()
			cfg := extensionConfig(testenv.Unique(t, "ns"))
			c, tn := newClient(t, b, cfg), tenant(t)
			stop := advanceWatermark(t, c, 2, 100*time.Millisecond)
			runPoller(t, c)
			obs := fillFresh(t, c, tn)
			until := obs.Add(cfg.HardLifetime + cfg.Lease + 600*time.Millisecond) // past hard and past MaxAge
			var last cache.LookupResult
			for time.Now().Before(until) {
				last = lookup(t, c, tn, "item", 0)
				if last.Status != "hit" {
					t.Fatalf("%v after obs: %s (entry %+v, W %v)", time.Since(obs), last.Status, last.Entry, c.Watermark().W)
				}
				time.Sleep(30 * time.Millisecond)
			}
			if !last.Entry.EffObs.After(obs) || !last.Entry.Hard.After(obs.Add(cfg.HardLifetime)) || !last.Entry.Obs.Equal(obs) {
				t.Fatalf("entry not extended: %+v", last.Entry)
			}
			w := stop()
			expectExpiry(t, c, tn, time.UnixMilli(w.UnixMilli()).Add(cfg.HardLifetime))
		})
		t.Run("no extension after invalidation", func(t *testing.T) {
			t.Parallel()
			cfg := extensionConfig(testenv.Unique(t, "ns"))
			c, tn := newClient(t, b, cfg), tenant(t)
			advanceWatermark(t, c, 2, 100*time.Millisecond)
			runPoller(t, c)
			obs := fillFresh(t, c, tn)
			if res, err := c.Invalidate(context.Background(), tn, "item", 6); err != nil || res != "applied" {
				t.Fatal(res, err)
			}
			expectExpiry(t, c, tn, obs.Add(cfg.HardLifetime))
		})
		t.Run("reset_at newer than obs disables extension", func(t *testing.T) {
			t.Parallel()
			cfg := extensionConfig(testenv.Unique(t, "ns"))
			c, tn := newClient(t, b, cfg), tenant(t)
			advanceWatermark(t, c, 2, 100*time.Millisecond)
			runPoller(t, c)
			obs := fillFresh(t, c, tn)
			if err := c.SetResetAt(context.Background(), obs.Add(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			// reset_at never moves back.
			if err := c.SetResetAt(context.Background(), obs.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 5*time.Second, "reset_at polled", func() error {
				if wm := c.Watermark(); !wm.ResetAt.Equal(obs.Add(time.Millisecond)) || !wm.W.After(wm.ResetAt) {
					return fmt.Errorf("watermark %+v", wm)
				}
				return nil
			})
			expectExpiry(t, c, tn, obs.Add(cfg.HardLifetime))
		})
		t.Run("unknown W when a partition is missing", func(t *testing.T) {
			t.Parallel()
			cfg := extensionConfig(testenv.Unique(t, "ns"))
			c, tn := newClient(t, b, cfg), tenant(t)
			advanceWatermark(t, c, 2, 100*time.Millisecond)
			if err := c.SetPartitions(context.Background(), 3); err != nil { // p2 never written
				t.Fatal(err)
			}
			runPoller(t, c)
			testenv.Eventually(t, 5*time.Second, "3 partitions polled", func() error {
				if wm := c.Watermark(); wm.Partitions != 3 || wm.Known || len(wm.PerPartition) != 2 {
					return fmt.Errorf("watermark %+v", wm)
				}
				return nil
			})
			obs := fillFresh(t, c, tn)
			expectExpiry(t, c, tn, obs.Add(cfg.HardLifetime))
		})
	})
}

// min_version skips a lower cached version (miss with a token, not a hit or
// a stale value) while plain readers keep getting the cached one.
func TestMinVersionSkipsLowerCachedVersion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, tn := newClient(t, b, testConfig()), tenant(t)
		mustFill(t, c, tn, "item", lookup(t, c, tn, "item", 0).Token, 41, time.Now())
		if r := lookup(t, c, tn, "item", 41); r.Status != "hit" || r.Entry.Version != 41 {
			t.Fatalf("min_version 41 = %+v", r)
		}
		r := lookup(t, c, tn, "item", 42)
		mustStatus(t, r, "miss", true)
		mustStatus(t, lookup(t, c, tn, "item", 42), "wait", false)
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 41 {
			t.Fatalf("plain lookup = %+v", r)
		}
		mustFill(t, c, tn, "item", r.Token, 42, time.Now())
		if r := lookup(t, c, tn, "item", 42); r.Status != "hit" || r.Entry.Version != 42 {
			t.Fatalf("min_version 42 after fill = %+v", r)
		}
	})
}

// Negative entries answer not_found for NegativeTTL from obs, then expire;
// an invalidation (the item was created) ends them at once.
func TestNegativeEntriesExpire(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		r := lookup(t, c, tn, "gone", 0)
		obs := time.Now()
		if err := c.FillNotFound(ctx, tn, "gone", r.Token, obs); err != nil {
			t.Fatal(err)
		}
		nf := lookup(t, c, tn, "gone", 0)
		if nf.Status != "not_found" || !nf.Entry.Hard.Equal(time.UnixMilli(obs.UnixMilli()).Add(cfg.NegativeTTL)) {
			t.Fatalf("lookup = %+v", nf)
		}
		time.Sleep(time.Until(nf.Entry.Hard) + 20*time.Millisecond)
		mustStatus(t, lookup(t, c, tn, "gone", 0), "miss", true)

		// Created after the negative answer: not_found must stop at once.
		r = lookup(t, c, tn, "born", 0)
		if err := c.FillNotFound(ctx, tn, "born", r.Token, time.Now()); err != nil {
			t.Fatal(err)
		}
		if res, _ := c.Invalidate(ctx, tn, "born", 1); res != "applied" {
			t.Fatal(res)
		}
		r = lookup(t, c, tn, "born", 0)
		mustStatus(t, r, "miss", true)
		mustFill(t, c, tn, "born", r.Token, 1, time.Now())

		// A deleted item (tombstone version 7) can be cached as not found.
		if res, _ := c.Invalidate(ctx, tn, "deleted", 7); res != "applied" {
			t.Fatal(res)
		}
		r = lookup(t, c, tn, "deleted", 0)
		if err := c.FillNotFound(ctx, tn, "deleted", r.Token, time.Now()); err != nil {
			t.Fatal(err)
		}
		if r := lookup(t, c, tn, "deleted", 0); r.Status != "not_found" || r.Entry.Version != 7 {
			t.Fatalf("tombstone lookup = %+v", r)
		}
		if h := hash(t, b, "catalog", tn, "deleted"); h["nf"] != "1" || h["floor"] != "7" {
			t.Fatalf("hash = %v", h)
		}
	})
}

// Past soft (or invalidated) within hard: the first caller gets the value and
// a refresh token, later callers the value without one.
func TestStaleGivesOneRefreshToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		obs := time.Now().Add(-cfg.SoftMax) // already soft-expired
		mustFill(t, c, tn, "item", lookup(t, c, tn, "item", 0).Token, 5, obs)
		first := lookup(t, c, tn, "item", 0)
		mustStatus(t, first, "stale", true)
		if first.Entry.Version != 5 || first.Entry.Stale {
			t.Fatalf("stale entry = %+v", first.Entry)
		}
		mustStatus(t, lookup(t, c, tn, "item", 0), "stale", false)
		mustFill(t, c, tn, "item", first.Token, 5, time.Now())
		mustStatus(t, lookup(t, c, tn, "item", 0), "hit", false)

		if res, _ := c.Invalidate(ctx, tn, "item", 6); res != "applied" {
			t.Fatal(res)
		}
		inv := lookup(t, c, tn, "item", 0)
		mustStatus(t, inv, "stale", true)
		if !inv.Entry.Stale || inv.Entry.Version != 5 {
			t.Fatalf("invalidated entry = %+v", inv.Entry)
		}
		mustStatus(t, lookup(t, c, tn, "item", 0), "stale", false)
		mustFill(t, c, tn, "item", inv.Token, 6, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 6 {
			t.Fatalf("after refresh = %+v", r)
		}
	})
}

// Physical TTLs: a floor without a value is kept at least FloorTTL, a token
// alone does not keep a key, a filled key lives MaxAge.
func TestPhysicalTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		ttl := func(item string) time.Duration {
			t.Helper()
			d, err := b.rdb.PTTL(ctx, schema.RedisKey(cfg.Namespace, tn, item)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if _, err := c.Invalidate(ctx, tn, "floor", 3); err != nil {
			t.Fatal(err)
		}
		if d := ttl("floor"); d < cfg.FloorTTL-time.Second || d > cfg.FloorTTL {
			t.Fatalf("floor-only key TTL %v, want ~%v", d, cfg.FloorTTL)
		}
		// A lookup's token does not shorten the floor's TTL.
		lookup(t, c, tn, "floor", 0)
		if d := ttl("floor"); d < cfg.FloorTTL-time.Second {
			t.Fatalf("token shortened the floor TTL to %v", d)
		}
		r := lookup(t, c, tn, "tok", 0)
		if d := ttl("tok"); d <= 0 || d > 2*cfg.Lease {
			t.Fatalf("token-only key TTL %v, want <= %v", d, 2*cfg.Lease)
		}
		mustFill(t, c, tn, "tok", r.Token, 1, time.Now())
		if d := ttl("tok"); d < cfg.MaxAge-time.Second {
			t.Fatalf("filled key TTL %v, want ~%v", d, cfg.MaxAge)
		}
		// Invalidated: the stale value is servable for at most the hard
		// lifetime, the floor must stay FloorTTL.
		if _, err := c.Invalidate(ctx, tn, "tok", 2); err != nil {
			t.Fatal(err)
		}
		if d := ttl("tok"); d < cfg.FloorTTL-time.Second || d < cfg.HardLifetime {
			t.Fatalf("invalidated key TTL %v, want ~%v", d, cfg.FloorTTL)
		}
	})
}
