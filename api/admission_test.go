package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A value over MaxValueBytes is answered (200, from the source) but not
// cached: the lease is released at once (the key is gone, so the next reader
// misses instead of waiting for a fill) and the skip is counted. A value
// within the cap is cached as usual.
func TestOversizedValueServedNotCached(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) { c.MaxValueBytes, c.L1Size = 200, 0 }, ccfg: longSoft})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES
		('acme', 'big', 1, jsonb_build_object('text', repeat('x', 300))), ('acme', 'small', 1, '{"n":1}')`)
	rdb := e.redis.Client(t)
	for i := range 2 {
		r := e.do("GET", in.item("big"), key, "")
		if r.code != 200 || r.version() != 1 || r.cacheStatus() != "tidemark; fwd=miss" {
			t.Fatalf("GET %d of the big item: %d %v %s", i, r.code, r.header, r.raw)
		}
		if n := rdb.Exists(context.Background(), schema.RedisKey("catalog", "acme", "big")).Val(); n != 0 {
			t.Fatalf("GET %d: the big item's key exists after the skipped fill (lease not released): %v",
				i, rdb.HGetAll(context.Background(), schema.RedisKey("catalog", "acme", "big")).Val())
		}
	}
	if got := skipped(t, in, "too_large"); got != 2 {
		t.Fatalf("fills skipped too_large = %v, want 2", got)
	}
	if r := e.do("GET", in.item("small"), key, ""); r.cacheStatus() != "tidemark; fwd=miss; stored" {
		t.Fatalf("small item: %d %v %s", r.code, r.header, r.raw)
	}
	if r := e.do("GET", in.item("small"), key, ""); r.cacheStatus() != "tidemark; hit" {
		t.Fatalf("small item again: %d %v %s", r.code, r.header, r.raw)
	}
}

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
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.FillRate, c.L1Size = fillRate, 0
		// Generous deadlines and budget: a loaded -race box must not turn
		// slowness into 503s; the property here is what stays cached.
		c.ForegroundRate, c.RequestTimeout, c.SourceTimeout, c.LookupTimeout, c.InFlightWait = 20000, 10*time.Second, 5*time.Second, 5*time.Second, 5*time.Second
	}, ccfg: longSoft})
	keyA, keyB := e.apiKey("scanner"), e.apiKey("steady")
	pad := strings.Repeat("x", 1000)
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'steady', 'h' || g, 1, jsonb_build_object('text', $1::text) FROM generate_series(1, $2::int) g`, pad, hotItems)
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'scanner', 'c' || g, 1, jsonb_build_object('text', $1::text) FROM generate_series(1, $2::int) g`, pad, coldItems)

	// B's reads: two readers over its hot set; ratio counts hits.
	var hits, reads atomic.Int64
	readB := func(ctx context.Context, w int) {
		for i := w; ctx.Err() == nil; i += 2 {
			r := e.do("GET", in.item(fmt.Sprintf("h%d", i%hotItems+1)), keyB, "")
			if r.code != 200 {
				t.Errorf("B GET: %d %s", r.code, r.raw)
				return
			}
			reads.Add(1)
			if strings.HasPrefix(r.cacheStatus(), "tidemark; hit") {
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
			wg.Add(1)
			go func() { defer wg.Done(); readB(ctx, w) }()
		}
		alongside(ctx)
		cancel()
		wg.Wait()
		return float64(hits.Load()) / float64(max(1, reads.Load()))
	}
	// Warm B's hot set (second-hit admission may need two passes), then fit
	// the cache to it with a little room to spare.
	for pass := 0; pass < 3; pass++ {
		for i := 1; i <= hotItems; i++ {
			e.do("GET", in.item(fmt.Sprintf("h%d", i)), keyB, "")
		}
	}
	rdb := e.redis.Client(t)
	ctx := context.Background()
	info := rdb.Info(ctx, "memory").Val()
	var usedMem int64
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			if _, err := fmt.Sscan(v, &usedMem); err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
		}
	}
	if usedMem == 0 {
		t.Fatalf("no used_memory in INFO memory: %q", info)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(usedMem+512<<10)).Err(); err != nil {
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
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					i := next.Add(1)
					if i > coldItems {
						return
					}
					asked.Add(1)
					if r := e.do("GET", in.item(fmt.Sprintf("c%d", i)), keyA, ""); r.code == 200 {
						scanned.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	})
	if asked.Load() < coldItems {
		t.Fatalf("the scan asked %d of %d cold ids before its 3-minute deadline", asked.Load(), coldItems)
	}
	run.scanned = scanned.Load()
	run.skipped = skipped(t, in, "admission")
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

// skipped reads tidemark_api_fills_skipped_total{reason} of one instance
// (its series exist from the start, at 0).
func skipped(t *testing.T, in *instance, reason string) float64 {
	t.Helper()
	return in.metric(t, "tidemark_api_fills_skipped_total", reason)
}
