package api

import (
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

// longSoft keeps values fresh for the whole test.
func longSoft(c *cache.Config) { c.SoftMin, c.SoftMax = 25*time.Second, 25*time.Second }
