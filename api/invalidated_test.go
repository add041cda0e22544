package api

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// An invalidated value is not served while the source can answer: the read
// after an applied invalidation returns the new version. It is served (marked
// stale-invalidated) only when the source cannot answer, within its hard
// deadline.
func TestInvalidatedValueServedOnlyAsFallback(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := newEnvDSN(t, pg.MigratedDatabase(t))
	in := e.instance(instOpts{cfg: func(c *Config) { c.L1Size = 0 }, ccfg: longSoft})
	cc := e.newCache(testCacheConfig())
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'i', 1, '"one"')`)
	if r := e.do("GET", in.item("i"), key, ""); r.code != 200 || r.version() != 1 {
		t.Fatalf("first GET: %d %s", r.code, r.raw)
	}

	// v2 committed and its invalidation applied (the applier's part).
	e.exec(`UPDATE catalog.items SET version = 2, display = '"two"' WHERE item_id = 'i'`)
	if _, err := cc.Invalidate(context.Background(), "acme", "i", 2); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", in.item("i"), key, "")
	if r.code != 200 || r.version() != 2 {
		t.Fatalf("GET after the invalidation: %d %s (%s), want v2", r.code, r.raw, r.header.Get("Cache-Status"))
	}

	// v3 committed and invalidated while the source is down: the v2 value,
	// within its hard deadline, is the best answer there is.
	e.exec(`UPDATE catalog.items SET version = 3, display = '"three"' WHERE item_id = 'i'`)
	if _, err := cc.Invalidate(context.Background(), "acme", "i", 3); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	start := time.Now()
	r = e.do("GET", in.item("i"), key, "")
	if r.code != 200 || r.version() != 2 || r.cacheStatus() != "tidemark; hit; detail=stale-invalidated" {
		t.Fatalf("GET with the source down: %d %s (%s), want the invalidated v2 as a fallback", r.code, r.raw, r.header.Get("Cache-Status"))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("fallback took %s", d)
	}
}
