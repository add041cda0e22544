package api

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"tidemark/lab/testenv"
	"tidemark/schema"
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
	if got := skipped(t, in, skipTooLarge); got != 2 {
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
// admission's doing.
func TestScanDoesNotEvictOtherTenantsHotSet(t *testing.T) {
	with := scanIsolation(t, 10)
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
	hotItems  = 500
	coldItems = 20000
	scanTime  = 8 * time.Second
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
	phase := func(d time.Duration, alongside func(ctx context.Context)) float64 {
		hits.Store(0)
		reads.Store(0)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); readB(ctx, w) }()
		}
		if alongside != nil {
			alongside(ctx)
		}
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
			fmt.Sscan(v, &usedMem)
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
	run.baseline = phase(3*time.Second, nil)
	var scanned atomic.Int64
	run.during = phase(scanTime, func(ctx context.Context) {
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
					if r := e.do("GET", in.item(fmt.Sprintf("c%d", i)), keyA, ""); r.code == 200 {
						scanned.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	})
	run.scanned = scanned.Load()
	run.skipped = skipped(t, in, skipAdmission)
	evicted := 0
	for _, l := range strings.Split(rdb.Info(ctx, "stats").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, "evicted_keys:"); ok {
			fmt.Sscan(v, &evicted)
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
	var m dto.Metric
	if err := in.srv.m.fillsSkipped.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Above its share a tenant's first miss of a key is not cached and its
// second within the window is; the doorkeeper forgets after two windows; a
// tenant within its share is not held back by another's scan.
func TestSecondHitAdmission(t *testing.T) {
	a := newAdmission(2)
	now := time.Unix(1000, 0)
	if !a.admit("scan", "c0", now) || !a.admit("scan", "c1", now) {
		t.Fatal("a new tenant's first second of its share is not admitted")
	}
	if a.admit("scan", "c2", now) {
		t.Fatal("first miss above the share admitted")
	}
	if !a.admit("scan", "c2", now.Add(time.Millisecond)) {
		t.Fatal("second miss within the window not admitted")
	}
	if a.admit("scan", "c3", now.Add(2*time.Millisecond)) {
		t.Fatal("another first miss above the share admitted")
	}
	if !a.admit("calm", "h1", now.Add(3*time.Millisecond)) {
		t.Fatal("a tenant within its share held back by another's scan")
	}
	later := now.Add(2*admissionWindow + time.Second)
	if !a.admit("scan", "x", later) || !a.admit("scan", "y", later) { // the refilled share
		t.Fatal("the share is not refilled")
	}
	if a.admit("scan", "c3", later) {
		t.Fatal("a miss from two windows ago still admitted")
	}
}

// A tenant scanning 100,000 cold ids at 700 misses/s, far over its share,
// gets almost none of them cached: no unconditional share while it is over,
// and a doorkeeper that never fills up answers few false second hits. A key
// it does miss twice is still admitted.
func TestScanLeaksFewFalseSecondHits(t *testing.T) {
	a := newAdmission(20)
	now := time.Unix(1000, 0)
	admitted := 0
	for i := range 100_000 {
		at := now.Add(time.Duration(i) * time.Second / 700)
		if a.admit("scan", "cold-"+strconv.Itoa(i), at) {
			admitted++
		}
		if i%1000 == 999 {
			// The calm tenant keeps within its share all along.
			if !a.admit("calm", "hot-"+strconv.Itoa(i), at) {
				t.Fatalf("calm tenant's miss %d not admitted", i)
			}
		}
	}
	// The first second of its share (10 fills) goes in before it is over.
	if limit := 10 + 100_000/500; admitted > limit {
		t.Fatalf("%d of 100,000 scanned ids admitted, want at most %d (0.2 %% false second hits)", admitted, limit)
	}
	end := now.Add(100_000 * time.Second / 700)
	a.admit("scan", "again", end)
	if !a.admit("scan", "again", end.Add(time.Second)) {
		t.Fatal("a second miss of a key within the window is not admitted")
	}
	t.Logf("%d of 100,000 scanned ids admitted", admitted)
}

// With the product defaults (2,000 fills/s, a 2-minute turnover), a small
// cache sizes the fill rate down: 2,000 entries fit in its maxmemory, so one
// process may fill about 17/s, and a scan of cold ids in one instant caches
// about that many of them, not 2,000.
func TestAdmissionSizedFromTheCache(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{})
	ctx := testenv.Context(t, 30*time.Second)
	rdb := e.redis.Client(t)
	pipe := rdb.Pipeline()
	for i := range 1000 {
		pipe.Set(ctx, fmt.Sprintf("other:%d", i), strings.Repeat("x", 1024), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	used := usedMemory(t, ctx, rdb)
	keys := rdb.DBSize(ctx).Val()
	// Room for as many keys again as the server holds now, of their mean size.
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(2*used, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	in.srv.sizeAdmission(ctx)
	want := float64(2*keys) / DefaultConfig().FillTurnover.Seconds() / float64(in.srv.procs.count())
	got := in.srv.admit.effective()
	if got < 0.8*want || got > 1.2*want {
		t.Fatalf("fill rate sized to a cache of about %d entries: %.1f/s, want about %.1f/s (entries / 2 min / processes)", 2*keys, got, want)
	}
	var m dto.Metric
	if err := in.srv.m.fillRate.Write(&m); err != nil || m.GetGauge().GetValue() != got {
		t.Errorf("tidemark_api_fill_rate = %v (%v), want %v", m.GetGauge().GetValue(), err, got)
	}
	now := time.Unix(1000, 0)
	admitted := 0
	for i := range 500 {
		if in.srv.admit.admit("scanner", fmt.Sprintf("cold-%d", i), now) {
			admitted++
		}
	}
	if admitted > int(got)+1 {
		t.Errorf("a scan of 500 cold ids in one instant cached %d, want at most the sized share's burst (%.0f)", admitted, got)
	}
	// maxmemory off: FillRate alone again.
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	in.srv.sizeAdmission(ctx)
	if got := in.srv.admit.effective(); got != DefaultConfig().FillRate {
		t.Errorf("without maxmemory: fill rate %.1f/s, want --fill-rate %.0f", got, DefaultConfig().FillRate)
	}
}

func usedMemory(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	t.Helper()
	info := rdb.Info(ctx, "memory").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no used_memory: %s", info)
	return 0
}
