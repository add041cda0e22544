package api

import (
	"testing"
	"time"
)

// min_version is bounded: far above the key's known floor it is refused with
// 400 and no source read; a source read below it is remembered, so a repeat
// is 412 without reading the source; a write through this process forgets
// the memo at once.
func TestMinVersionBounds(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.L1Size, c.MinVersionSlack, c.RequestTimeout, c.SourceTimeout = 0, 10, 10*time.Second, 5*time.Second
	}, ccfg: longSoft})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"b","display":"one"}`)
	if r := e.do("GET", in.item("b"), key, ""); r.code != 200 || r.version() != 1 {
		t.Fatalf("GET: %d %s", r.code, r.raw)
	}
	before := e.sourceReads()
	for _, id := range []string{"b", "never-seen"} {
		r := e.do("GET", in.item(id)+"?min_version=9223372036854775807", key, "")
		if r.code != 400 || r.body["code"] != "min_version_out_of_range" {
			t.Fatalf("%s: huge min_version: %d %s", id, r.code, r.raw)
		}
	}
	if got := e.sourceReads() - before; got != 0 {
		t.Fatalf("refused min_version made %d source reads", got)
	}
	// Within the slack: read once, then remembered.
	r := e.do("GET", in.item("b")+"?min_version=5", key, "")
	if r.code != 412 || r.current() != 1 {
		t.Fatalf("min_version=5: %d %s", r.code, r.raw)
	}
	for range 5 {
		r := e.do("GET", in.item("b")+"?min_version=5", key, "")
		if r.code != 412 || r.current() != 1 || r.header.Get("Cache-Status") != "tidemark; hit; detail=below-min-memo" {
			t.Fatalf("repeat: %d %s %v", r.code, r.raw, r.header)
		}
	}
	if got := e.sourceReads() - before; got != 1 {
		t.Fatalf("min_version=5 six times made %d source reads, want 1", got)
	}
	if r := e.do("PATCH", in.item("b"), key, `{"expected_version":1,"display":"two"}`, "Idempotency-Key", "p"); r.code != 200 || r.version() != 2 {
		t.Fatalf("PATCH: %d %s", r.code, r.raw)
	}
	if r := e.do("GET", in.item("b")+"?min_version=2", key, ""); r.code != 200 || r.version() != 2 {
		t.Fatalf("own write after the memo: %d %s", r.code, r.raw)
	}
}
