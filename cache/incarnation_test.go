package cache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A watermark read before the server restarted from an older snapshot
// extends nothing there until a poll sees the new server: the snapshot may
// lack invalidations the watermark stood for (here "changed"'s), and W would
// make the old value a hit verified past its change until the next poll.
// Fails with watermark_here (scripts/incarnation.lua) returning w.
func TestWatermarkOfAnotherIncarnationExtendsNothing(t *testing.T) {
	r := testenv.StartRedis(t)
	b := &backend{name: "standalone", rdb: r.Client(t), single: r}
	cfg := testConfig()
	cfg.HardLifetime, cfg.SoftMin, cfg.SoftMax, cfg.FloorTTL, cfg.MaxAge = 20*time.Second, 10*time.Second, 10*time.Second, 20*time.Second, time.Minute
	cfg.WatermarkPoll = time.Hour // one poll, at start: none between the restart and the lookups
	cfg.Namespace = testenv.Unique(t, "ns")
	c, ctx := newClient(t, b, cfg), context.Background()
	ten := tenant(t)
	obs := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for _, item := range []string{"changed", "unchanged"} {
		res := lookup(t, c, ten, item, 0)
		if res.Status != cache.StatusMiss || res.Token.IsZero() {
			t.Fatalf("%s: first lookup %+v, want a miss with a lease", item, res)
		}
		if err := c.Fill(ctx, ten, item, res.Token, 1, payload(1), obs); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetPartitions(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Save(ctx).Err(); err != nil { // the snapshot the server comes back from
		t.Fatal(err)
	}
	if _, err := c.Invalidate(ctx, ten, "changed", 2); err != nil {
		t.Fatal(err)
	}
	w := time.Now().Add(-100 * time.Millisecond).Truncate(time.Millisecond)
	if err := c.SetWatermark(ctx, 0, w); err != nil {
		t.Fatal(err)
	}
	runPoller(t, c)
	if wm := c.Watermark(); !wm.Known || !wm.W.Equal(w) || wm.Seen == "" {
		t.Fatalf("watermark %+v, want W %s and the server's run_id", wm, w)
	}
	if res := lookup(t, c, ten, "unchanged", 0); res.Status != cache.StatusHit || !res.Entry.EffObs.Equal(w) {
		t.Fatalf("before the restart: %+v, want a hit extended to W %s", res, w)
	}

	r.Stop()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	for _, item := range []string{"changed", "unchanged"} {
		var res cache.LookupResult
		testenv.Eventually(t, 10*time.Second, "a lookup on the restarted server", func() error {
			var err error
			res, err = c.Lookup(ctx, ten, item, 0)
			return err
		})
		if res.Status != cache.StatusHit || res.Entry.Version != 1 {
			t.Fatalf("%s after the restart: %+v, want the snapshot's v1", item, res)
		}
		if !res.Entry.EffObs.Equal(res.Entry.Obs) {
			t.Errorf("%s after the restart: effective observation %s, want its own %s: a watermark read before the restart extended it",
				item, res.Entry.EffObs, res.Entry.Obs)
		}
	}

	// A poll of the restarted server extends again.
	c2 := newClient(t, b, cfg)
	if err := c2.SetWatermark(ctx, 0, w); err != nil {
		t.Fatal(err)
	}
	runPoller(t, c2)
	testenv.Eventually(t, 5*time.Second, "an extension after a poll of the new server", func() error {
		res, err := c2.Lookup(ctx, ten, "unchanged", 0)
		if err != nil {
			return err
		}
		if !res.Entry.EffObs.Equal(w) {
			return fmt.Errorf("%+v, want it extended to %s", res, w)
		}
		return nil
	})
}
