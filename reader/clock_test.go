package reader

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/clockguard"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A reader whose clock guard finds the host's clock 2 s fast stops
// answering from the cache: every read goes to the source (detail=clock)
// and nothing is filled, while a reader with a good clock hits. The cache
// tier refuses a fill observed by a fast clock on its own
// (cache's TestFillRefusesFutureObservationAndLongLifetime), and api's
// TestClockOffsetFailsReadiness maps the guard to /readyz.
func TestClockOffsetStopsCacheAnswers(t *testing.T) {
	r := testenv.StartRedis(t)
	src := newMemSource()
	src.set("acme", "c", 5, `"five"`)
	good := newTestReaderOf(t, r.Client(t), src, func(c *Config) { c.L1Size = 0 }, func(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second })

	rdb := r.Client(t)
	gcfg := clockguard.DefaultConfig()
	gcfg.Interval, gcfg.TestOffset = 200*time.Millisecond, 2*time.Second
	guard, err := clockguard.New(gcfg, clockguard.Deps{Redis: rdb, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	gctx, gstop := context.WithCancel(context.Background())
	gdone := make(chan struct{})
	go func() { defer close(gdone); _ = guard.Run(gctx) }()
	t.Cleanup(func() { gstop(); <-gdone })
	testenv.Eventually(t, 30*time.Second, "the guard measures the fast clock", func() error {
		if err := guard.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "clock offset") {
			return err
		}
		return nil
	})
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SourcePool, cfg.Mapping, cfg.L1Size = "test", "test.items#0", 0
	fast, err := New(cfg, Deps{Source: src, Cache: cc, Redis: rdb, Clock: guard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fast.Close)

	c := Query{Tenant: "acme", Item: "c"}
	getAdmitted(t, good, c)
	if r := good.Get(t.Context(), c); r.Kind != Found || r.CacheStatus != "tidemark; hit" {
		t.Fatalf("good clock: %d %q", r.Kind, r.CacheStatus)
	}
	before := src.reads.Load()
	for range 3 {
		r := getAdmitted(t, fast, c)
		if r.Kind != Found || r.Version != 5 || r.CacheStatus != "tidemark; fwd=miss; detail=clock" {
			t.Fatalf("fast clock: %d version %d %q, want a source read", r.Kind, r.Version, r.CacheStatus)
		}
	}
	if got := src.reads.Load() - before; got != 3 {
		t.Fatalf("fast clock: %d source reads, want 3", got)
	}
	// A key only the fast reader read is not filled.
	src.set("acme", "fresh", 1, `"x"`)
	if r := getAdmitted(t, fast, Query{Tenant: "acme", Item: "fresh"}); r.Kind != Found || r.CacheStatus != "tidemark; fwd=miss; detail=clock" {
		t.Fatalf("fast clock, new key: %d %q", r.Kind, r.CacheStatus)
	}
	if n := rdb.Exists(t.Context(), schema.RedisKey("catalog", "acme", "fresh")).Val(); n != 0 {
		t.Fatalf("the fast reader's read of a new key left its key in the cache: %v", rdb.HGetAll(t.Context(), schema.RedisKey("catalog", "acme", "fresh")).Val())
	}
}
