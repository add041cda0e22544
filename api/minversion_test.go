package api

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/schema"
)

// min_version is bounded: a source read below it is remembered, so a repeat
// is 412 (400 when far above the source's version) without reading the
// source; a write through this process forgets the memo at once.
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
	// Far above the source's version: 400, once from the source, then from
	// the memo.
	for i := range 3 {
		r := e.do("GET", in.item("b")+"?min_version=9223372036854775807", key, "")
		if r.code != 400 || r.body["code"] != "min_version_out_of_range" || r.current() != 1 {
			t.Fatalf("huge min_version: %d %s, want 400 min_version_out_of_range with current_version 1", r.code, r.raw)
		}
		// One reason per answer: from the source first, then from the memo.
		want := "tidemark; fwd=miss"
		if i > 0 {
			want = "tidemark; hit"
		}
		got := r.header.Get("Cache-Status")
		if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; detail=min-version-beyond-source") || strings.Count(got, "detail=") != 1 {
			t.Fatalf("huge min_version, answer %d: Cache-Status %q, want %q…, one detail, min-version-beyond-source", i+1, got, want)
		}
	}
	if got := e.sourceReads() - before; got != 1 {
		t.Fatalf("a huge min_version three times made %d source reads, want 1", got)
	}
	before = e.sourceReads()
	// Within the slack: 412, from the same memo (the source said 1).
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
	if got := e.sourceReads() - before; got != 0 {
		t.Fatalf("min_version=5 six times within the memo made %d source reads, want 0", got)
	}
	if r := e.do("PATCH", in.item("b"), key, `{"expected_version":1,"display":"two"}`, "Idempotency-Key", "p"); r.code != 200 || r.version() != 2 {
		t.Fatalf("PATCH: %d %s", r.code, r.raw)
	}
	if r := e.do("GET", in.item("b")+"?min_version=2", key, ""); r.code != 200 || r.version() != 2 {
		t.Fatalf("own write after the memo: %d %s", r.code, r.raw)
	}
}

// A long-lived item whose floor is no longer in Redis (FloorTTL passed,
// evicted, Redis restarted): its writer's min_version reads the source in
// the read-your-writes class instead of being refused, and so does one under
// a stored floor far behind the source. A min_version the source refuses
// gives back the lease its LOOKUP took, so the key's next reader is not kept
// waiting.
func TestMinVersionAboveMissingFloor(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.L1Size, c.MinVersionSlack, c.RequestTimeout, c.SourceTimeout = 0, 10, 10*time.Second, 5*time.Second
	}, ccfg: longSoft})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"old","display":"one"}`)
	e.exec(`UPDATE catalog.items SET version = 1500 WHERE tenant_id = 'acme' AND item_id = 'old'`)
	rkey := schema.RedisKey("catalog", "acme", "old")
	rdb := e.redis.Client(t)
	if err := rdb.Del(t.Context(), rkey).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", in.item("old")+"?min_version=1500", key, "")
	if r.code != 200 || r.version() != 1500 {
		t.Fatalf("min_version=1500 on an item at 1500 without a floor in Redis: %d %s, want 200 at version 1500", r.code, r.raw)
	}
	// A stored floor far behind the source (put back by a late
	// invalidation after the key was lost, or an adopted table whose
	// versions jump) refuses nothing either: the writer of version 5000
	// gets it although the floor says 1500.
	e.exec(`UPDATE catalog.items SET version = 5000 WHERE tenant_id = 'acme' AND item_id = 'old'`)
	if err := rdb.Del(t.Context(), rkey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(t.Context(), rkey, schema.FieldFloor, "1500").Err(); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", in.item("old")+"?min_version=5000", key, "")
	if r.code != 200 || r.version() != 5000 {
		t.Fatalf("min_version=5000 on an item at 5000 under a stored floor of 1500: %d %s, want 200 at version 5000", r.code, r.raw)
	}
	// Far above the source, 400 from the source's word, and the lease its
	// LOOKUP took goes back.
	if err := rdb.Del(t.Context(), rkey).Err(); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", in.item("old")+"?min_version=99999", key, "")
	if r.code != 400 || r.body["code"] != "min_version_out_of_range" || r.current() != 5000 {
		t.Fatalf("min_version=99999 on an item at 5000: %d %s, want 400 with current_version 5000", r.code, r.raw)
	}
	if tok := rdb.HGet(t.Context(), rkey, "tok").Val(); tok != "" {
		t.Fatalf("after the refused min_version the key still holds lease %q: the refusal must release the lease its LOOKUP took", tok)
	}
}
