package reader

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// scanRun is one run of the scan-isolation test.
type scanRun struct {
	baseline, during float64 // tenant B's hit ratio before and during A's scan
	scanned          int64   // cold ids tenant A read
	skipped          float64 // fills skipped by admission
}

// One tenant scanning cold ids does not evict another tenant's hot set from
// a full cache (maxmemory with volatile-lru): with admission B's hit ratio
// drops by at most 5 points; without it (FillRate 0) the scan evicts B's
// entries, which the second run shows, so the first run's figure is the
// admission's doing. Both phases are counted in reads, not timed: a slow
// box scans the same ids more slowly, so the scan writes ~4 MB into the
// cache's 512 KB of room whatever the box's speed, and what admission lets
// through (FillRate 5/s) stays inside that room for a scan of up to ~90 s.
func TestScanDoesNotEvictOtherTenantsHotSet(t *testing.T) {
	with := scanIsolation(t, 5)
	without := scanIsolation(t, 0)
	t.Logf("B's hit ratio: no scan %.1f%%; scan with admission %.1f%% (A scanned %d cold ids, %v fills skipped); "+
		"no scan %.1f%%, scan without admission %.1f%% (A scanned %d cold ids)",
		100*with.baseline, 100*with.during, with.scanned, with.skipped, 100*without.baseline, 100*without.during, without.scanned)
	if drop := with.baseline - with.during; drop > 0.05 {
		t.Errorf("with admission B's hit ratio dropped %.1f points (%.1f%% -> %.1f%%), more than 5",
			100*drop, 100*with.baseline, 100*with.during)
	}
	if drop := without.baseline - without.during; drop <= 0.05 {
		t.Errorf("without admission B's hit ratio dropped only %.1f points (%.1f%% -> %.1f%%): the scan did not fill the cache, so the run above proves nothing",
			100*drop, 100*without.baseline, 100*without.during)
	}
}

const (
	hotItems     = 500
	coldItems    = 4000 // scanned once each, ~1 KB a value: 8x the cache's room
	baselineGets = 1500 // B's reads before the scan
)

func scanIsolation(t *testing.T, fillRate float64) scanRun {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	value := `{"text":"` + strings.Repeat("x", 1000) + `"}`
	for i := 1; i <= hotItems; i++ {
		src.set("steady", fmt.Sprintf("h%d", i), 1, value)
	}
	for i := 1; i <= coldItems; i++ {
		src.set("scanner", fmt.Sprintf("c%d", i), 1, value)
	}
	rd := newTestReaderOf(t, rdb, src, func(c *Config) {
		c.FillRate, c.L1Size = fillRate, 0
		// Generous deadlines and budget: a loaded -race box must not turn
		// slowness into Unavailable; the property here is what stays cached.
		c.ForegroundRate, c.RequestTimeout, c.SourceTimeout, c.LookupTimeout, c.InFlightWait = 20000, 10*time.Second, 5*time.Second, 5*time.Second, 5*time.Second
	}, func(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second })

	// B's reads: two readers over its hot set; ratio counts hits.
	var hits, reads atomic.Int64
	readB := func(ctx context.Context, w int) {
		for i := w; ctx.Err() == nil; i += 2 {
			r := rd.Get(ctx, Query{Tenant: "steady", Item: fmt.Sprintf("h%d", i%hotItems+1)})
			if r.Kind != Found {
				if ctx.Err() != nil { // the phase ended while this read was out
					return
				}
				t.Errorf("B Get: %d %q", r.Kind, r.CacheStatus)
				return
			}
			reads.Add(1)
			if strings.HasPrefix(r.CacheStatus, "tidemark; hit") {
				hits.Add(1)
			}
		}
	}
	// phase runs B's readers until alongside returns (it ends the phase
	// when its work is done, not at a time).
	phase := func(alongside func(ctx context.Context)) float64 {
		hits.Store(0)
		reads.Store(0)
		ctx, cancel := context.WithCancel(testenv.Context(t, 3*time.Minute))
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() { readB(ctx, w) })
		}
		alongside(ctx)
		cancel()
		wg.Wait()
		return float64(hits.Load()) / float64(max(1, reads.Load()))
	}
	// Warm B's hot set (second-hit admission may need two passes; a fresh
	// budget refuses the first reads), then fit the cache to it with a
	// little room to spare.
	for pass := 0; pass < 3; pass++ {
		for i := 1; i <= hotItems; i++ {
			rd.Get(t.Context(), Query{Tenant: "steady", Item: fmt.Sprintf("h%d", i)})
		}
	}
	ctx := testenv.Context(t, 30*time.Second)
	used := usedMemory(t, ctx, rdb)
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+512<<10)).Err(); err != nil {
		t.Fatal(err)
	}
	var run scanRun
	run.baseline = phase(func(ctx context.Context) {
		testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("B made %d baseline reads", baselineGets), func() error {
			if n := reads.Load(); n < baselineGets {
				return fmt.Errorf("%d reads", n)
			}
			return nil
		})
	})
	var scanned, asked atomic.Int64
	run.during = phase(func(ctx context.Context) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 6 {
			wg.Go(func() {
				for ctx.Err() == nil {
					i := next.Add(1)
					if i > coldItems {
						return
					}
					asked.Add(1)
					if r := rd.Get(ctx, Query{Tenant: "scanner", Item: fmt.Sprintf("c%d", i)}); r.Kind == Found {
						scanned.Add(1)
					}
				}
			})
		}
		wg.Wait()
	})
	if asked.Load() < coldItems {
		t.Fatalf("the scan asked %d of %d cold ids before its 3-minute deadline", asked.Load(), coldItems)
	}
	run.scanned = scanned.Load()
	run.skipped = counterValue(t, rd.m.fillsSkipped.WithLabelValues(skipAdmission))
	evicted := 0
	for _, l := range strings.Split(rdb.Info(ctx, "stats").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, "evicted_keys:"); ok {
			if _, err := fmt.Sscan(v, &evicted); err != nil {
				t.Fatalf("evicted_keys %q: %v", v, err)
			}
		}
	}
	t.Logf("fill rate %v: B %d reads during the scan, hit ratio %.3f -> %.3f; A scanned %d; skipped %v; redis evicted %d keys",
		fillRate, reads.Load(), run.baseline, run.during, run.scanned, run.skipped, evicted)
	return run
}
