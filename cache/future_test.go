package cache_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// redisNow is the cache tier's clock.
func redisNow(t *testing.T, b *backend) time.Time {
	t.Helper()
	now, err := b.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// A resolved time ahead of Redis TIME by more than the clock bound is
// refused and counted; a W that is ahead anyway (handed to LOOKUP) vouches
// for nothing; a stored p<N> that is ahead is replaced by the next marker
// and deleted by the poller, not kept until real time catches up with it.
func TestWatermarkAheadOfRedisTime(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		cfg.Namespace = testenv.Unique(t, "ns")
		reg := prometheus.NewRegistry()
		c, err := cache.New(cfg, cache.Deps{Redis: b.rdb, Log: testenv.Logger(t), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		wmKey := schema.WatermarkKey(cfg.Namespace)
		if err := c.SetPartitions(ctx, 2); err != nil {
			t.Fatal(err)
		}

		// Refused: nothing stored, the refusal counted in the hash.
		future := redisNow(t, b).Add(time.Hour)
		err = c.SetWatermark(ctx, 0, future)
		if !errors.Is(err, cache.ErrWatermarkAhead) {
			t.Fatalf("SetWatermark(now + 1h) = %v, want ErrWatermarkAhead", err)
		}
		h := b.rdb.HGetAll(ctx, wmKey).Val()
		if _, ok := h["p0"]; ok || h[schema.FieldFutureRefused] != "1" || h[schema.FieldFutureRefusedField] != "p0" {
			t.Fatalf("after a refused watermark the hash is %v, want no p0 and future_refused=1 for p0", h)
		}
		// Within the bound: taken.
		if err := c.SetWatermark(ctx, 1, redisNow(t, b).Add(promise.ClockBound/2)); err != nil {
			t.Fatalf("SetWatermark(now + bound/2) = %v, want it taken", err)
		}

		// LOOKUP given a W an hour ahead does not extend the entry.
		tn := tenant(t)
		obs := time.Now().Add(-500 * time.Millisecond)
		mustFill(t, c, tn, "item", lookup(t, c, tn, "item", 0).Token, 1, obs)
		c.UseWatermarkForTest(cache.Watermark{Known: true, W: future, Partitions: 2})
		r := lookup(t, c, tn, "item", 0)
		if r.Entry.EffObs.UnixMilli() != obs.UnixMilli() {
			t.Fatalf("LOOKUP with W = now + 1h: effective observation %s, want the entry's own %s (W from the future must count as unknown)",
				r.Entry.EffObs.UTC().Format(time.RFC3339Nano), obs.UTC().Format(time.RFC3339Nano))
		}

		// A future p0 already stored (written before the cache tier refused
		// them, or left by a Redis clock stepped back).
		if err := b.rdb.HSet(ctx, wmKey, "p0", strconv.FormatInt(future.UnixMilli(), 10)).Err(); err != nil {
			t.Fatal(err)
		}
		wm, err := c.ReadWatermark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wm.Known || len(wm.Ahead) != 1 || wm.Ahead[0] != 0 || wm.FutureRefused != 1 {
			t.Fatalf("watermark with p0 an hour ahead = %+v, want unknown with p0 ahead and one refusal", wm)
		}
		// The next good marker replaces it although it is lower.
		good := redisNow(t, b).Add(-time.Second)
		if err := c.SetWatermark(ctx, 0, good); err != nil {
			t.Fatal(err)
		}
		if got := b.rdb.HGet(ctx, wmKey, "p0").Val(); got != strconv.FormatInt(good.UnixMilli(), 10) {
			t.Fatalf("p0 after a good marker = %s, want %d (a stored future value must be replaced)", got, good.UnixMilli())
		}
		// Without a marker, the poller deletes it.
		if err := b.rdb.HSet(ctx, wmKey, "p1", strconv.FormatInt(future.UnixMilli(), 10)).Err(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		testenv.Eventually(t, 30*time.Second, "the poller deletes p1 an hour ahead", func() error {
			if v, err := b.rdb.HGet(ctx, wmKey, "p1").Result(); err == nil {
				return errors.New("p1 = " + v + " still stored")
			}
			return nil
		})
		cancel()
		<-done
		if n := testenv.Metric(t, reg, "tidemark_cache_watermark_repairs_total"); n != 1 {
			t.Fatalf("tidemark_cache_watermark_repairs_total = %v, want 1", n)
		}
	})
}
