package reader

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A value over MaxValueBytes is answered (Found, from the source) but not
// cached: the lease is released at once (the key is gone, so the next reader
// misses instead of waiting for a fill) and the skip is counted. A value
// within the cap is cached as usual.
func TestOversizedValueServedNotCached(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "big", 1, `{"text":"`+strings.Repeat("x", 300)+`"}`)
	src.set("acme", "small", 1, `{"n":1}`)
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.MaxValueBytes, c.L1Size = 200, 0 },
		func(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second })
	ctx := testenv.Context(t, 30*time.Second)
	rkey := schema.RedisKey("catalog", "acme", "big")
	for i := range 2 {
		r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "big"})
		if r.Kind != Found || r.Version != 1 || r.CacheStatus != "tidemark; fwd=miss" {
			t.Fatalf("Get %d of the big item: %d version %d %q", i, r.Kind, r.Version, r.CacheStatus)
		}
		if n := rdb.Exists(ctx, rkey).Val(); n != 0 {
			t.Fatalf("Get %d: the big item's key exists after the skipped fill (lease not released): %v", i, rdb.HGetAll(ctx, rkey).Val())
		}
	}
	if got := counterValue(t, rd.m.fillsSkipped.WithLabelValues(skipTooLarge)); got != 2 {
		t.Fatalf("fills skipped too_large = %v, want 2", got)
	}
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "small"}); r.CacheStatus != "tidemark; fwd=miss; stored" {
		t.Fatalf("small item: %d %q", r.Kind, r.CacheStatus)
	}
	if r := rd.Get(ctx, Query{Tenant: "acme", Item: "small"}); r.CacheStatus != "tidemark; hit" {
		t.Fatalf("small item again: %d %q", r.Kind, r.CacheStatus)
	}
}
