package reader

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// 500 concurrent reads of one cold key across 4 readers (4 serve
// processes, each with its own Redis connections): exactly one source read,
// and every answer has the same version.
func TestStampedeOneSourceRead(t *testing.T) {
	r := testenv.StartRedis(t)
	src := newMemSource()
	src.set("acme", "hot", 7, `{"n":1}`)
	// A source read takes a while, as a real one does: the other readers'
	// lookups land while the first read is out, which only the lease
	// protocol keeps from reading too.
	src.delay = 20 * time.Millisecond
	var rds []*Reader
	for range 4 {
		// Generous deadlines: on a loaded -race box one read can take a
		// second, and a Lookup slower than LookupTimeout counts as Redis
		// down (a budgeted read without a lease); the property here is the
		// lease protocol, not the box's speed.
		rds = append(rds, newTestReaderOf(t, r.Client(t), src, func(c *Config) {
			c.RequestTimeout, c.SourceTimeout, c.LookupTimeout = 10*time.Second, 5*time.Second, 5*time.Second
		}, func(c *cache.Config) { c.Lease = 5 * time.Second }))
	}
	for _, rd := range rds { // a fresh budget starts empty: this test is about item reads
		getAdmitted(t, rd, Query{Tenant: "acme", Item: "warm"})
	}
	before := src.reads.Load()

	const n = 500
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]Result, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = rds[i%4].Get(context.Background(), Query{Tenant: "acme", Item: "hot"})
		})
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if r.Kind != Found || r.Version != 7 {
			t.Fatalf("Get %d: %d version %d %q, want Found v7", i, r.Kind, r.Version, r.CacheStatus)
		}
	}
	if got := src.reads.Load() - before; got != 1 {
		seen := map[string]int{}
		for _, r := range results {
			seen[r.CacheStatus]++
		}
		t.Fatalf("source reads = %d, want exactly 1; the %d answers' Cache-Status: %v", got, n, seen)
	}
}

// A reader paused after reading v41 cannot install v41 once v42 is committed
// and invalidated: its fill is rejected and the next read returns v42.
func TestStaleSetRace(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	leaseLong := func(c *cache.Config) {
		c.Lease = 10 * time.Second
		c.FloorTTL = 60 * time.Second
		c.MaxAge = 10 * time.Minute
	}
	src := newMemSource()
	src.set("acme", "race", 41, `{"v":41}`)
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	src.afterRead = func(_, item string, it Item) {
		if item == "race" && it.Version == 41 {
			once.Do(func() { close(paused); <-resume })
		}
	}
	// The rejection must come from the invalidation, not from lease expiry.
	// The budget is not what this tests: a fresh one admits a read every
	// 1 µs after its first, so the race's read is never refused.
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.RequestTimeout, c.ForegroundRate = 20*time.Second, 1e6 }, leaseLong)
	ccfg := cache.DefaultConfig()
	leaseLong(&ccfg)
	applier, err := cache.New(ccfg, cache.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	getAdmitted(t, rd, Query{Tenant: "acme", Item: "warm"}) // a fresh budget starts empty

	first := make(chan Result, 1)
	go func() { first <- rd.Get(context.Background(), Query{Tenant: "acme", Item: "race"}) }()
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never reached the source")
	}
	// v42 committed, and the applier's part: the pipeline delivers (acme, race, 42).
	src.set("acme", "race", 42, `{"v":42}`)
	if _, err := applier.Invalidate(testenv.Context(t, 10*time.Second), "acme", "race", 42); err != nil {
		t.Fatal(err)
	}
	close(resume)
	r := <-first
	if r.Kind != Found || r.Version != 41 {
		t.Fatalf("paused read: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	if strings.Contains(r.CacheStatus, "stored") {
		t.Fatalf("paused read's fill was stored: Cache-Status %q", r.CacheStatus)
	}
	if r := rd.Get(context.Background(), Query{Tenant: "acme", Item: "race"}); r.Kind != Found || r.Version != 42 {
		t.Fatalf("read after the race: %d version %d %q, want v42", r.Kind, r.Version, r.CacheStatus)
	}
}

// A missing item is NotFound, negative-cached: the repeat does not read the
// source, and a creation shows after the negative entry expires (at once for
// min_version readers). A tombstone is NotFound too.
func TestNotFoundNegativeCache(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	rd := newTestReaderOf(t, rdb, src, nil, nil)
	ghost := Query{Tenant: "acme", Item: "ghost"}
	before := src.reads.Load()
	if r := getAdmitted(t, rd, ghost); r.Kind != NotFound {
		t.Fatalf("Get: %d %q", r.Kind, r.CacheStatus)
	}
	if got := src.reads.Load() - before; got != 1 {
		t.Fatalf("source reads for the first Get = %d, want 1", got)
	}
	r := rd.Get(t.Context(), ghost)
	if r.Kind != NotFound || r.CacheStatus != "tidemark; hit; detail=not-found" {
		t.Fatalf("repeat: %d %q", r.Kind, r.CacheStatus)
	}
	if got := src.reads.Load() - before; got != 1 {
		t.Fatalf("source reads = %d, want 1", got)
	}
	created := time.Now()
	src.set("acme", "ghost", 1, `1`)
	if r := rd.Get(t.Context(), ghost); r.Kind != NotFound {
		t.Fatalf("within the negative TTL: %d %q", r.Kind, r.CacheStatus)
	}
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "ghost", MinVersion: 1}); r.Kind != Found || r.Version != 1 {
		t.Fatalf("min_version=1: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	testenv.Eventually(t, 5*time.Second, "the item shows once the negative entry expires", func() error {
		if r := rd.Get(t.Context(), ghost); r.Kind != Found {
			return fmt.Errorf("Get: %d %q", r.Kind, r.CacheStatus)
		}
		return nil
	})
	if d := time.Since(created); d > 4*time.Second {
		t.Fatalf("negative entry lived %s", d)
	}
	// Deleted by version 2: a tombstone.
	src.put("acme", "ghost", Item{Version: 2})
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "ghost", MinVersion: 2}); r.Kind != NotFound {
		t.Fatalf("tombstone: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
}

// A soft-expired value is answered stale at once, and the reader holding
// the refresh token re-reads it in the background under the background
// class.
func TestStaleServedAndRefreshedInBackground(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "s", 1, `"one"`)
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size = 0 }, func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime = 300*time.Millisecond, 300*time.Millisecond, 20*time.Second
	})
	s := Query{Tenant: "acme", Item: "s"}
	if r := getAdmitted(t, rd, s); r.Kind != Found || r.Version != 1 {
		t.Fatalf("Get: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	// Changed behind the pipeline's back: only a refresh can find it.
	src.set("acme", "s", 2, `"two"`)
	testenv.Eventually(t, 5*time.Second, "the value soft-expires", func() error {
		r := rd.Get(t.Context(), s)
		if r.CacheStatus == "tidemark; hit" {
			return fmt.Errorf("still fresh: %q", r.CacheStatus)
		}
		if r.Kind != Found || r.Version != 1 || r.CacheStatus != "tidemark; hit; detail=stale" {
			t.Fatalf("soft-expired Get: %d version %d %q, want the stale v1 at once", r.Kind, r.Version, r.CacheStatus)
		}
		return nil
	})
	testenv.Eventually(t, 5*time.Second, "the background refresh lands", func() error {
		if r := rd.Get(t.Context(), s); r.Version != 2 {
			return fmt.Errorf("Get: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
		}
		return nil
	})
	if got := src.classReads(ClassBackground); got < 1 {
		t.Fatalf("background reads the source saw = %d", got)
	}
	if got := counterValue(t, rd.m.sourceReads.WithLabelValues(ClassBackground, "found")); got < 1 {
		t.Fatalf("tidemark_reader_source_reads_total{class=background,result=found} = %v", got)
	}
}
