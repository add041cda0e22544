package api

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A cold GET reads the source and fills; the next is a cache hit with an Age;
// the API key decides the tenant.
func TestReadPathAndAuth(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{ccfg: longSoft})
	key := e.apiKey("acme")

	if r := e.do("GET", in.item("x"), "", ""); r.code != 401 {
		t.Fatalf("no key: %d %s", r.code, r.raw)
	}
	if r := e.do("GET", in.item("x"), "tmk_nope", ""); r.code != 401 {
		t.Fatalf("unknown key: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"x","display":{"name":"X"}}`); r.code != 201 || r.version() != 1 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	r := e.do("GET", in.item("x"), key, "")
	if r.code != 200 || r.version() != 1 || r.body["item_id"] != "x" || r.cacheStatus() != "tidemark; fwd=miss; stored" {
		t.Fatalf("cold GET: %d %v %s", r.code, r.header, r.raw)
	}
	if d, _ := r.body["display"].(map[string]any); d["name"] != "X" {
		t.Fatalf("display: %s", r.raw)
	}
	r = e.do("GET", in.item("x"), key, "")
	if r.code != 200 || r.cacheStatus() != "tidemark; hit" || r.header.Get("Age") == "" {
		t.Fatalf("warm GET: %d %v %s", r.code, r.header, r.raw)
	}
	// Hot: the second hit admits it to L1.
	e.do("GET", in.item("x"), key, "")
	r = e.do("GET", in.item("x"), key, "")
	if r.code != 200 || r.cacheStatus() != "tidemark; hit; detail=l1" {
		t.Fatalf("L1 GET: %d %v %s", r.code, r.header, r.raw)
	}
	if got := e.sourceReads(); got != 1 {
		t.Fatalf("source reads = %d, want 1", got)
	}
}

// With the foreground budget at 50/s, 2,000 distinct cold keys at once get
// at most burst + 50/s source reads; the rest are 503 with Retry-After.
func TestBudgetBoundsSourceReads(t *testing.T) {
	e := newEnv(t)
	const rate, burstWindow = 50.0, 100 * time.Millisecond
	var ins []*instance
	for range 2 { // two processes share one budget
		ins = append(ins, e.instance(instOpts{cfg: func(c *Config) { c.ForegroundRate = rate; c.BudgetBurst = burstWindow }}))
	}
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'k' || g, 1, '{}' FROM generate_series(1, 2000) g`)
	before := e.sourceReads()

	const n = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do("GET", ins[i%2].item(fmt.Sprintf("k%d", i+1)), key, "")
			if r.code == 503 && r.header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			mu.Lock()
			codes[r.code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := e.sourceReads() - before
	burst := int64(burstWindow/(time.Second/time.Duration(rate))) + 1
	limit := burst + int64(rate*elapsed.Seconds()) + 1
	t.Logf("codes %v, source reads %d in %s (limit %d)", codes, reads, elapsed, limit)
	if codes[200]+codes[503] != n {
		t.Fatalf("answers other than 200 and 503: %v", codes)
	}
	if reads > limit {
		t.Fatalf("source reads %d exceed the budget %d (burst %d + %v/s over %s)", reads, limit, burst, rate, elapsed)
	}
	if reads == 0 || codes[503] == 0 || int64(codes[200]) > reads {
		t.Fatalf("implausible: %d reads, codes %v", reads, codes)
	}
}

// min_version: a lower cached version is skipped and the source read; a
// min_version above the source's version is a fast 412, one read, no loop.
func TestMinVersionReadYourWrites(t *testing.T) {
	e := newEnv(t)
	// No soft expiry during the test: a background refresh would be a
	// second source read.
	in := e.instance(instOpts{cfg: func(c *Config) { c.L1Size = 0 }, ccfg: longSoft})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"m","display":"one"}`)
	if r := e.do("GET", in.item("m"), key, ""); r.version() != 1 {
		t.Fatalf("GET: %s", r.raw)
	}
	if r := e.do("PATCH", in.item("m"), key, `{"expected_version":1,"display":"two"}`, "Idempotency-Key", "p1"); r.version() != 2 {
		t.Fatalf("PATCH: %d %s", r.code, r.raw)
	}
	// No pipeline runs here: the cache still holds v1 for plain readers.
	if r := e.do("GET", in.item("m"), key, ""); r.version() != 1 {
		t.Fatalf("plain GET should still see the cached v1: %s", r.raw)
	}
	r := e.do("GET", in.item("m")+"?min_version=2", key, "")
	if r.code != 200 || r.version() != 2 || r.body["display"] != "two" {
		t.Fatalf("min_version=2: %d %s", r.code, r.raw)
	}
	before := e.sourceReads()
	t0 := time.Now()
	r = e.do("GET", in.item("m")+"?min_version=9", key, "")
	if r.code != 412 || r.current() != 2 {
		t.Fatalf("min_version=9: %d %s", r.code, r.raw)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("412 took %s", d)
	}
	if got := e.sourceReads() - before; got != 1 {
		t.Fatalf("min_version=9 made %d source reads, want 1", got)
	}
	if r := e.do("GET", in.item("m")+"?min_version=x", key, ""); r.code != 400 {
		t.Fatalf("bad min_version: %d", r.code)
	}
	// Given twice or empty is refused, never read as its first value or as
	// absent: a read without read-your-writes would answer 200 or a 304 that
	// vouches for a version below min_version (seen with If-None-Match: *).
	for _, qs := range []string{"?min_version=&min_version=9", "?min_version=2&min_version=9", "?min_version="} {
		for _, inm := range []string{"", "*"} {
			r := e.do("GET", in.item("m")+qs, key, "", "If-None-Match", inm)
			if r.code != 400 || r.body["code"] != "bad_request" {
				t.Fatalf("GET %s with If-None-Match %q: %d %s, want 400 bad_request", qs, inm, r.code, r.raw)
			}
		}
	}
	if r := e.do("DELETE", in.item("m")+"?expected_version=", key, ""); r.code != 400 {
		t.Fatalf("DELETE with an empty expected_version: %d %s, want 400 (not a delete without a precondition)", r.code, r.raw)
	}
	if r := e.do("DELETE", in.item("m")+"?expected_version=1&expected_version=2", key, ""); r.code != 400 {
		t.Fatalf("DELETE with expected_version twice: %d %s, want 400", r.code, r.raw)
	}
	if r := e.do("GET", in.url+"/v1/catalog/items?limit=1&limit=500", key, ""); r.code != 400 {
		t.Fatalf("list with limit twice: %d %s, want 400", r.code, r.raw)
	}
}

// Postgres stopped: the cached value is served (stale) until its hard
// deadline, then 503 with Retry-After; never 404.
func TestPostgresDownStaleThen503(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := newEnvDSN(t, pg.MigratedDatabase(t))
	const hard = 2 * time.Second
	in := e.instance(instOpts{cfg: func(c *Config) { c.LookupTimeout, c.RequestTimeout = 3*time.Second, 3*time.Second }, ccfg: func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime, c.Lease, c.NegativeTTL = 200*time.Millisecond, 300*time.Millisecond, hard, 300*time.Millisecond, time.Second
	}})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"p","display":"v"}`)
	t0 := time.Now()
	if r := e.do("GET", in.item("p"), key, ""); r.code != 200 {
		t.Fatalf("GET: %d %s", r.code, r.raw)
	}
	t1 := time.Now()
	pg.Stop()

	var served, unavailable int
	for time.Since(t1) < hard+1500*time.Millisecond {
		sent := time.Now()
		r := e.do("GET", in.item("p"), key, "")
		switch {
		case r.code == 200:
			if sent.After(t1.Add(hard)) {
				t.Fatalf("served at %s after the fill, past the hard deadline %s", sent.Sub(t0), hard)
			}
			served++
		case r.code == 503:
			if sent.Before(t0.Add(hard - 300*time.Millisecond)) {
				t.Fatalf("503 at %s, before the hard deadline: %v %s", sent.Sub(t0), r.header, r.raw)
			}
			if r.header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			unavailable++
		default:
			t.Fatalf("GET during the outage: %d %s", r.code, r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if served == 0 || unavailable == 0 {
		t.Fatalf("served %d, unavailable %d: want both", served, unavailable)
	}
	if r := e.do("GET", in.item("never-existed"), key, ""); r.code != 503 {
		t.Fatalf("unknown item during the outage: %d, want 503 (not 404)", r.code)
	}
	_ = http.StatusOK
}

// Redis down: reads fall through to the source only through the per-process
// fallback rate and in-flight cap, never unbounded; answers are 200 or 503.
func TestRedisDownBoundedFallthrough(t *testing.T) {
	e := newEnv(t)
	const rate = 5.0
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = rate, 200*time.Millisecond, 250*time.Millisecond
	}})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'r' || g, 3, '{}' FROM generate_series(1, 200) g`)
	e.do("GET", in.item("r1"), key, "") // the key is known before Redis goes
	// The process takes a share of the fallback only once the other serve
	// processes have had time to count it.
	waitFor(t, 30*time.Second, "the process knows its share", func() bool { _, ok := in.srv.rd.Share(time.Now()); return ok })
	e.redis.Kill()
	before := e.sourceReads()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do("GET", in.item(fmt.Sprintf("r%d", i+1)), key, "")
			if r.code == 200 && (r.version() != 3 || !strings.Contains(r.header.Get("Cache-Status"), "cache-unavailable")) {
				t.Errorf("200 without the source's version or the cache-unavailable detail: %v %s", r.header, r.raw)
			}
			mu.Lock()
			codes[r.code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := e.sourceReads() - before
	limit := int64(200*time.Millisecond/(time.Second/rate)) + 1 + int64(rate*elapsed.Seconds()) + 1
	t.Logf("codes %v, %d source reads in %s (limit %d)", codes, reads, elapsed, limit)
	if codes[200]+codes[503] != 200 || codes[200] == 0 {
		t.Fatalf("answers: %v", codes)
	}
	if reads > limit {
		t.Fatalf("%d source reads with Redis down, limit %d", reads, limit)
	}
}

// longSoft keeps values fresh for the whole test.
func longSoft(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second }
