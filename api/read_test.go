package api

import (
	"fmt"
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

// Query parameters the read and write paths refuse with 400 (the answers
// to a well-formed min_version are reader behaviour, tested in
// reader/minversion_test.go; their HTTP mapping in TestMinVersionAnswersOverHTTP).
func TestBadQueryParameters(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) { c.L1Size = 0 }, ccfg: longSoft})
	key := e.apiKey("acme")
	if r := e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"m","display":"one"}`); r.code != 201 || r.version() != 1 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	if r := e.do("GET", in.item("m"), key, ""); r.code != 200 || r.version() != 1 {
		t.Fatalf("GET: %d %s", r.code, r.raw)
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

// A stopped Postgres is a failed source read, never an answer about the
// item (what the reader then serves is tested on a failing source in
// reader/fallback_test.go): an unknown item is 503 with Retry-After and the
// source-unavailable detail, not 404.
func TestPostgresDownIs503NotFound(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := newEnvDSN(t, pg.MigratedDatabase(t))
	in := e.instance(instOpts{})
	key := e.apiKey("acme")
	// The key check and the source budget are warm before Postgres goes.
	if r := e.do("GET", in.item("warm"), key, ""); r.code != 404 {
		t.Fatalf("GET: %d %s", r.code, r.raw)
	}
	pg.Stop()
	r := e.do("GET", in.item("never-existed"), key, "")
	if r.code != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Cache-Status") != "tidemark; fwd=miss; detail=source-unavailable" {
		t.Fatalf("unknown item with Postgres down: %d Retry-After %q Cache-Status %q %s, want 503 with Retry-After (not 404)",
			r.code, r.header.Get("Retry-After"), r.header.Get("Cache-Status"), r.raw)
	}
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
	// The process admits locally only once the others (on Redis) would hold
	// its share back: from two seconds after its last beat until the
	// presence TTL (docs/design.md, Source budget). Until then it holds.
	waitFor(t, 10*time.Second, "the local fallback window opens", func() bool {
		return e.do("GET", in.item("r200"), key, "").code == 200
	})
	before := e.sourceReads()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 199 {
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
	if codes[200]+codes[503] != 199 || codes[200] == 0 {
		t.Fatalf("answers: %v", codes)
	}
	if reads > limit {
		t.Fatalf("%d source reads with Redis down, limit %d", reads, limit)
	}
}

// longSoft keeps values fresh for the whole test.
func longSoft(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second }
