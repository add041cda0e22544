package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Watermarks and reset_at only move forward; W is the minimum over the
// partitions and unknown until every partition has one.
func TestWatermarkRaiseOnlyAndMinimum(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		cfg.Namespace = testenv.Unique(t, "ns")
		c, ctx := newClient(t, b, cfg), context.Background()
		if wm := c.Watermark(); wm.Known || !wm.ReadAt.IsZero() {
			t.Fatalf("watermark before any poll = %+v, want zero", wm)
		}
		t0 := time.UnixMilli(1_700_000_000_000)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(c.SetPartitions(ctx, 2))
		must(c.SetWatermark(ctx, 0, t0.Add(5*time.Second)))
		wm, err := c.ReadWatermark(ctx)
		must(err)
		if wm.Known || wm.Partitions != 2 {
			t.Fatalf("one of two partitions: %+v", wm)
		}
		must(c.SetWatermark(ctx, 1, t0.Add(3*time.Second)))
		must(c.SetWatermark(ctx, 0, t0)) // lower: ignored
		must(c.SetResetAt(ctx, t0.Add(time.Second)))
		must(c.SetResetAt(ctx, t0)) // lower: ignored
		wm, err = c.ReadWatermark(ctx)
		must(err)
		if !wm.Known || !wm.W.Equal(t0.Add(3*time.Second)) || !wm.PerPartition[0].Equal(t0.Add(5*time.Second)) ||
			!wm.ResetAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("watermark = %+v", wm)
		}
		// Operators read the same thing with redis-cli.
		h := b.rdb.HGetAll(ctx, schema.WatermarkKey(cfg.Namespace)).Val()
		if h["p0"] != "1700000005000" || h["p1"] != "1700000003000" || h["reset_at"] != "1700000001000" || h["partitions"] != "2" {
			t.Fatalf("watermark hash = %v", h)
		}
	})
}

// A watermark write carrying the identity its applier bound is refused
// once the hash lost it (deleted, then recreated in part by another call),
// and writes nothing; a new bind after the loss gets a new generation; a
// bind of the same server adopts the stored identity, one of another server
// replaces it, and a write with it is refused here: this is not the server
// it names (the hash a promoted replica brings along holds its old
// master's identity).
func TestWatermarkWriteRefusedOnceTheHashIsLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		cfg.Namespace = testenv.Unique(t, "ns")
		c, ctx := newClient(t, b, cfg), context.Background()
		key := schema.WatermarkKey(cfg.Namespace)
		now := time.Now()
		srv, err := c.ServerIdentity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.BindWatermarkIdentity(ctx, srv)
		if err != nil {
			t.Fatal(err)
		}
		if cache.IdentityServer(id) != srv || id == srv {
			t.Fatalf("bound %q, want %s#<generation>", id, srv)
		}
		if again, err := c.BindWatermarkIdentity(ctx, srv); err != nil || again != id {
			t.Fatalf("second bind of %s = %q, %v; want the stored %q adopted", srv, again, err, id)
		}
		if err := c.SetWatermarkIdentity(ctx, 0, now, id); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SetWatermarkIdentity(ctx, 0, now, id); !errors.Is(err, cache.ErrWatermarkIdentity) {
			t.Fatalf("write after the hash was deleted = %v, want ErrWatermarkIdentity", err)
		}
		if n := b.rdb.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("the refused write recreated the hash: %v", b.rdb.HGetAll(ctx, key).Val())
		}
		if err := c.SetPartitions(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := c.SetWatermarkIdentity(ctx, 0, now, id); !errors.Is(err, cache.ErrWatermarkIdentity) {
			t.Fatalf("write after the hash was recreated without its identity = %v, want ErrWatermarkIdentity", err)
		}
		rebound, err := c.BindWatermarkIdentity(ctx, srv)
		if err != nil || rebound == id || cache.IdentityServer(rebound) != srv {
			t.Fatalf("bind after the loss = %q, %v; want a new generation of %s (old %q)", rebound, err, srv, id)
		}
		if err := c.SetWatermarkIdentity(ctx, 0, now, id); !errors.Is(err, cache.ErrWatermarkIdentity) {
			t.Fatalf("write with the old generation = %v, want ErrWatermarkIdentity", err)
		}
		if err := c.SetWatermarkIdentity(ctx, 0, now, rebound); err != nil {
			t.Fatal(err)
		}
		const elsewhere = "0123456789abcdef0123456789abcdef01234567/89abcdef0123456789abcdef0123456789abcdef"
		other, err := c.BindWatermarkIdentity(ctx, elsewhere)
		if err != nil || cache.IdentityServer(other) != elsewhere {
			t.Fatalf("bind of another server = %q, %v", other, err)
		}
		if err := c.SetWatermarkIdentity(ctx, 0, time.Now(), other); !errors.Is(err, cache.ErrWatermarkIdentity) {
			t.Fatalf("write on a server the identity does not name = %v, want ErrWatermarkIdentity", err)
		}
		if wm, err := c.ReadWatermark(ctx); err != nil || wm.Identity != other || wm.PerPartition[0].UnixMilli() != now.UnixMilli() {
			t.Fatalf("watermark = %+v, %v; want identity %q and p0 kept", wm, err, other)
		}
	})
}

// The four metric families count what happened.
func TestMetrics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		reg := prometheus.NewRegistry()
		c, err := cache.New(testConfig(), cache.Deps{Redis: b.rdb, Log: testenv.Logger(t), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		// A second client on the same registry (API and applier in one
		// process) shares the series.
		c2, err := cache.New(testConfig(), cache.Deps{Redis: b.rdb, Log: testenv.Logger(t), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, tn := context.Background(), tenant(t)
		r := lookup(t, c, tn, "item", 0)
		lookup(t, c2, tn, "item", 0)
		mustReject(t, c.Fill(ctx, tn, "item", cache.Token{1}, 1, payload(1), time.Now()), "token")
		mustFill(t, c, tn, "item", r.Token, 1, time.Now())
		lookup(t, c, tn, "item", 0)
		if _, err := c.Invalidate(ctx, tn, "item", 1); err != nil {
			t.Fatal(err)
		}
		for _, m := range []struct {
			name, label, value string
			want               float64
		}{
			{"tidemark_cache_lookups_total", "result", "miss", 1},
			{"tidemark_cache_lookups_total", "result", "wait", 1},
			{"tidemark_cache_lookups_total", "result", "hit", 1},
			{"tidemark_cache_fill_rejected_total", "reason", "token", 1},
			{"tidemark_cache_fill_rejected_total", "reason", "version", 0},
			{"tidemark_cache_invalidations_total", "result", "revoked", 1}, // not above the floor, but it revokes the value observed before it
		} {
			if got := testenv.Metric(t, reg, m.name, m.label, m.value); got != m.want {
				t.Errorf("%s{%s=%q} = %v, want %v", m.name, m.label, m.value, got, m.want)
			}
		}
		runPoller(t, c)
		testenv.Metric(t, reg, "tidemark_cache_watermark_age_seconds")
	})
}

// A failed poll forgets W until a poll succeeds: the server may be coming
// back from a snapshot without the invalidations the last W stood for
// (before, a failed poll kept the last value). The poll fails here on a
// field it cannot parse. Fails with the failing branch keeping W.
func TestFailedPollForgetsTheWatermark(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		cfg.Namespace = testenv.Unique(t, "ns")
		c, ctx := newClient(t, b, cfg), context.Background()
		runPoller(t, c)
		if err := c.SetPartitions(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.SetWatermark(ctx, 0, time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		wait := func(known bool, what string) {
			t.Helper()
			testenv.Eventually(t, 5*time.Second, what, func() error {
				if wm := c.Watermark(); wm.Known != known {
					return fmt.Errorf("watermark %+v, want known %v", wm, known)
				}
				return nil
			})
		}
		wait(true, "W known")
		key := schema.WatermarkKey(cfg.Namespace)
		good := b.rdb.HGet(ctx, key, "p0").Val()
		if err := b.rdb.HSet(ctx, key, "p0", "not-a-time").Err(); err != nil {
			t.Fatal(err)
		}
		wait(false, "W forgotten while the polls fail")
		if err := b.rdb.HSet(ctx, key, "p0", good).Err(); err != nil {
			t.Fatal(err)
		}
		wait(true, "W known again")
	})
}
