package api

import (
	"strings"
	"testing"
	"time"
)

// The HTTP mapping of min_version's answers (the memo and the source's
// word are reader behaviour, tested in reader/minversion_test.go): far
// above the source's version is 400 min_version_out_of_range with
// current_version and the Cache-Status detail, within the slack 412 with
// current_version and the memo's Cache-Status, and a write through this
// process forgets the memo at once (api calls Reader.Forget).
func TestMinVersionAnswersOverHTTP(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.L1Size, c.MinVersionSlack, c.RequestTimeout, c.SourceTimeout = 0, 10, 10*time.Second, 5*time.Second
	}, ccfg: longSoft})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"b","display":"one"}`)
	if r := e.do("GET", in.item("b"), key, ""); r.code != 200 || r.version() != 1 {
		t.Fatalf("GET: %d %s", r.code, r.raw)
	}
	r := e.do("GET", in.item("b")+"?min_version=9223372036854775807", key, "")
	if r.code != 400 || r.body["code"] != "min_version_out_of_range" || r.current() != 1 {
		t.Fatalf("huge min_version: %d %s, want 400 min_version_out_of_range with current_version 1", r.code, r.raw)
	}
	if got := r.header.Get("Cache-Status"); !strings.HasSuffix(got, "; detail=min-version-beyond-source") {
		t.Fatalf("huge min_version: Cache-Status %q, want …; detail=min-version-beyond-source", got)
	}
	for range 2 {
		r := e.do("GET", in.item("b")+"?min_version=5", key, "")
		if r.code != 412 || r.current() != 1 {
			t.Fatalf("min_version=5: %d %s, want 412 with current_version 1", r.code, r.raw)
		}
	}
	if got := r.header.Get("Cache-Status"); got == "" {
		t.Fatal("412 without a Cache-Status")
	}
	if r := e.do("GET", in.item("b")+"?min_version=5", key, ""); r.header.Get("Cache-Status") != "tidemark; hit; detail=below-min-memo" {
		t.Fatalf("repeat of a min_version the memo answers: %d Cache-Status %q", r.code, r.header.Get("Cache-Status"))
	}
	if r := e.do("PATCH", in.item("b"), key, `{"expected_version":1,"display":"two"}`, "Idempotency-Key", "p"); r.code != 200 || r.version() != 2 {
		t.Fatalf("PATCH: %d %s", r.code, r.raw)
	}
	if r := e.do("GET", in.item("b")+"?min_version=2", key, ""); r.code != 200 || r.version() != 2 {
		t.Fatalf("own write after the memo: %d %s", r.code, r.raw)
	}
}
