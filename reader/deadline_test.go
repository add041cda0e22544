package reader

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// An invalidated value whose source stalls across its hard deadline, with
// concurrent readers joining each other's resolutions: nothing is answered
// Found at or after the deadline, and no answer waits longer than the
// request and source timeouts allow.
func TestStalledSourceNeverServesPastHardDeadline(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "st", 1, `"one"`)
	const hard = 3 * time.Second
	rd := newTestReaderOf(t, rdb, src, func(c *Config) {
		c.RequestTimeout, c.SourceTimeout, c.LookupTimeout, c.L1Size = 3*time.Second, time.Second, time.Second, 0
	}, func(c *cache.Config) {
		c.HardLifetime, c.SoftMin, c.SoftMax, c.NegativeTTL, c.Lease = hard, hard, hard, time.Second, 500*time.Millisecond
	})
	ctx := testenv.Context(t, 60*time.Second)
	if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "st"}); r.Kind != Found || r.CacheStatus != "tidemark; fwd=miss; stored" {
		t.Fatalf("cold Get: %d %q", r.Kind, r.CacheStatus)
	}
	filled := time.Now() // the value's observation is before this
	// v2 committed and applied, but the source now stalls: every reader of
	// the invalidated v1 tries the source, and v1 is only a fallback.
	applier, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applier.Invalidate(ctx, "acme", "st", 2); err != nil {
		t.Fatal(err)
	}
	src.stall(true)

	var (
		mu                    sync.Mutex
		served, late, refused int
		slowest               time.Duration
	)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for time.Since(filled) < hard+2*time.Second {
				sent := time.Now()
				r := rd.Get(context.Background(), Query{Tenant: "acme", Item: "st"})
				got := time.Now()
				mu.Lock()
				slowest = max(slowest, got.Sub(sent))
				switch r.Kind {
				case Found:
					served++
					if !got.Before(r.Hard) || got.After(filled.Add(hard+100*time.Millisecond)) {
						late++
						t.Errorf("Found answered %s after the fill, its hard deadline %s after (hard lifetime %s): %q",
							got.Sub(filled), r.Hard.Sub(filled), hard, r.CacheStatus)
					}
				case Unavailable:
					refused++
				default:
					t.Errorf("Get: %d %q", r.Kind, r.CacheStatus)
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	t.Logf("served %d, refused %d, late %d, slowest answer %s", served, refused, late, slowest)
	if served == 0 || refused == 0 {
		t.Fatalf("served %d, refused %d: want both (the fallback before the deadline, Unavailable after)", served, refused)
	}
	// Request deadline, then at most one fresh read bounded by the source
	// timeout (plus its client-side margin), plus scheduling slack.
	if limit := 3*time.Second + 1200*time.Millisecond + 1500*time.Millisecond; slowest > limit {
		t.Fatalf("slowest answer %s with the source stalled, limit %s", slowest, limit)
	}
}
