package reader

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// min_version is bounded: a source read below it is remembered, so a repeat
// is BelowMin (BadMinVersion when far above the source's version) without
// reading the source; a write through this process (Forget) ends the memo
// at once.
func TestMinVersionBounds(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "b", 1, `"one"`)
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size, c.MinVersionSlack = 0, 10 }, nil)
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "b"}); r.Kind != Found || r.Version != 1 {
		t.Fatalf("Get: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	before := src.reads.Load()
	// Far above the source's version: BadMinVersion, once from the source,
	// then from the memo.
	for i := range 3 {
		r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "b", MinVersion: 9223372036854775807})
		if r.Kind != BadMinVersion || r.Version != 1 {
			t.Fatalf("huge min_version: %d version %d, want BadMinVersion with version 1", r.Kind, r.Version)
		}
		// One reason per answer: from the source first, then from the memo.
		want := "tidemark; fwd=miss"
		if i > 0 {
			want = "tidemark; hit"
		}
		if got := r.CacheStatus; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; detail=min-version-beyond-source") || strings.Count(got, "detail=") != 1 {
			t.Fatalf("huge min_version, answer %d: Cache-Status %q, want %q…, one detail, min-version-beyond-source", i+1, got, want)
		}
	}
	if got := src.reads.Load() - before; got != 1 {
		t.Fatalf("a huge min_version three times made %d source reads, want 1", got)
	}
	before = src.reads.Load()
	// Within the slack: BelowMin, from the same memo (the source said 1).
	for range 6 {
		r := rd.Get(t.Context(), Query{Tenant: "acme", Item: "b", MinVersion: 5})
		if r.Kind != BelowMin || r.Version != 1 || r.CacheStatus != "tidemark; hit; detail=below-min-memo" {
			t.Fatalf("min_version=5: %d version %d %q, want BelowMin at 1 from the memo", r.Kind, r.Version, r.CacheStatus)
		}
	}
	if got := src.reads.Load() - before; got != 0 {
		t.Fatalf("min_version=5 six times within the memo made %d source reads, want 0", got)
	}
	// This process wrote version 2: the memo is forgotten at once.
	src.set("acme", "b", 2, `"two"`)
	rd.Forget("acme", "b")
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "b", MinVersion: 2}); r.Kind != Found || r.Version != 2 {
		t.Fatalf("own write after the memo: %d version %d %q, want Found at 2", r.Kind, r.Version, r.CacheStatus)
	}
}

// A long-lived item whose floor is no longer in Redis (FloorTTL passed,
// evicted, Redis restarted): its writer's min_version reads the source in
// the read-your-writes class instead of being refused, and so does one under
// a stored floor far behind the source.
func TestMinVersionAboveMissingFloor(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "old", 1500, `"one"`)
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size, c.MinVersionSlack = 0, 10 }, nil)
	ctx := testenv.Context(t, 30*time.Second)
	rkey := schema.RedisKey("catalog", "acme", "old")
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "old", MinVersion: 1500}); r.Kind != Found || r.Version != 1500 {
		t.Fatalf("min_version=1500 on an item at 1500 without a floor in Redis: %d version %d %q, want Found at 1500", r.Kind, r.Version, r.CacheStatus)
	}
	// A stored floor far behind the source (put back by a late
	// invalidation after the key was lost, or an adopted table whose
	// versions jump) refuses nothing either: the writer of version 5000
	// gets it although the floor says 1500.
	src.set("acme", "old", 5000, `"two"`)
	if err := rdb.Del(ctx, rkey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, rkey, schema.FieldFloor, "1500").Err(); err != nil {
		t.Fatal(err)
	}
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "old", MinVersion: 5000}); r.Kind != Found || r.Version != 5000 {
		t.Fatalf("min_version=5000 on an item at 5000 under a stored floor of 1500: %d version %d %q, want Found at 5000", r.Kind, r.Version, r.CacheStatus)
	}
}

// min_version: a lower cached version is skipped and the source read; a
// min_version above the source's version is a fast BelowMin, one read, no
// loop.
func TestMinVersionSkipsLowerCachedVersion(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "m", 1, `"one"`)
	// No soft expiry during the test: a background refresh would be a
	// second source read.
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size = 0 }, func(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second })
	m := Query{Tenant: "acme", Item: "m"}
	if r := getAdmitted(t, rd, m); r.Kind != Found || r.Version != 1 {
		t.Fatalf("Get: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	src.set("acme", "m", 2, `"two"`)
	// No pipeline runs here: the cache still holds v1 for plain readers.
	if r := rd.Get(t.Context(), m); r.Kind != Found || r.Version != 1 {
		t.Fatalf("plain Get should still see the cached v1: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	m.MinVersion = 2
	if r := getAdmitted(t, rd, m); r.Kind != Found || r.Version != 2 || string(r.Payload) != `"two"` {
		t.Fatalf("min_version=2: %d version %d %s %q", r.Kind, r.Version, r.Payload, r.CacheStatus)
	}
	before := src.reads.Load()
	t0 := time.Now()
	m.MinVersion = 9
	if r := getAdmitted(t, rd, m); r.Kind != BelowMin || r.Version != 2 {
		t.Fatalf("min_version=9: %d version %d %q, want BelowMin at 2", r.Kind, r.Version, r.CacheStatus)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("BelowMin took %s", d)
	}
	if got := src.reads.Load() - before; got != 1 {
		t.Fatalf("min_version=9 made %d source reads, want 1", got)
	}
}

// The below-min memo delays a writer's read of a write made through another
// process: it has an upper bound.
func TestMinVersionMemoIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Mapping = "t"
	cfg.MinVersionMemo = MaxMinVersionMemo
	if err := cfg.Validate(); err != nil {
		t.Fatalf("memo %s refused: %v", cfg.MinVersionMemo, err)
	}
	cfg.MinVersionMemo = 10 * time.Minute
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MinVersionMemo:") {
		t.Fatalf("memo %s: Validate = %v, want a MinVersionMemo problem", cfg.MinVersionMemo, err)
	}
}
