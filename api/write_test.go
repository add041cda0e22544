package api

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// PATCH with an Idempotency-Key: one increment however often it is retried
// (also concurrently); the same key with another body is 422; a stale
// expected_version is 409 with the current version.
func TestPatchIdempotencyAndConflicts(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{})
	key := e.apiKey("acme")
	if r := e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"i","display":{"n":1}}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"i","display":{"n":9}}`); r.code != 409 || r.current() != 1 {
		t.Fatalf("create again: %d %s", r.code, r.raw)
	}
	body := `{"expected_version":1,"display":{"n":2}}`
	first := e.do("PATCH", in.item("i"), key, body, "Idempotency-Key", "req-1")
	if first.code != 200 || first.version() != 2 {
		t.Fatalf("PATCH: %d %s", first.code, first.raw)
	}
	again := e.do("PATCH", in.item("i"), key, body, "Idempotency-Key", "req-1")
	if again.code != 200 || again.version() != 2 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v %s", again.code, again.header, again.raw)
	}
	if r := e.do("PATCH", in.item("i"), key, `{"expected_version":1,"display":{"n":3}}`, "Idempotency-Key", "req-1"); r.code != 422 {
		t.Fatalf("same key, other body: %d %s", r.code, r.raw)
	}
	if r := e.do("PATCH", in.item("other"), key, body, "Idempotency-Key", "req-1"); r.code != 422 {
		t.Fatalf("same key, other item: %d %s", r.code, r.raw)
	}
	conflict := e.do("PATCH", in.item("i"), key, `{"expected_version":1,"display":{"n":4}}`, "Idempotency-Key", "req-2")
	if conflict.code != 409 || conflict.current() != 2 {
		t.Fatalf("stale expected_version: %d %s", conflict.code, conflict.raw)
	}
	// The 409 is the stored answer of req-2 too.
	if r := e.do("PATCH", in.item("i"), key, `{"expected_version":1,"display":{"n":4}}`, "Idempotency-Key", "req-2"); r.code != 409 || r.current() != 2 {
		t.Fatalf("retried 409: %d %s", r.code, r.raw)
	}
	if r := e.do("PATCH", in.item("i"), key, body); r.code != 400 {
		t.Fatalf("PATCH without Idempotency-Key: %d %s", r.code, r.raw)
	}

	// Eight concurrent retries of one request: one increment, one answer.
	var wg sync.WaitGroup
	got := make([]resp, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = e.do("PATCH", in.item("i"), key, `{"expected_version":2,"display":{"n":5}}`, "Idempotency-Key", "req-3")
		}()
	}
	wg.Wait()
	for i, r := range got {
		if r.code != 200 || r.version() != 3 {
			t.Fatalf("concurrent retry %d: %d %s", i, r.code, r.raw)
		}
	}
	if v := e.count(`SELECT version FROM catalog.items WHERE tenant_id = 'acme' AND item_id = 'i'`); v != 3 {
		t.Fatalf("version in Postgres = %d, want 3", v)
	}

	// DELETE is a tombstone with a new version; the ID is never reused.
	if r := e.do("DELETE", in.item("i")+"?expected_version=2", key, ""); r.code != 409 || r.current() != 3 {
		t.Fatalf("DELETE stale: %d %s", r.code, r.raw)
	}
	if r := e.do("DELETE", in.item("i")+"?expected_version=3", key, ""); r.code != 200 || r.version() != 4 {
		t.Fatalf("DELETE: %d %s", r.code, r.raw)
	}
	if n := e.count(`SELECT count(*) FROM catalog.items WHERE tenant_id = 'acme' AND item_id = 'i' AND state = 'deleted' AND version = 4`); n != 1 {
		t.Fatal("no tombstone at v4")
	}
	if r := e.do("GET", in.item("i")+"?min_version=4", key, ""); r.code != 404 {
		t.Fatalf("GET tombstone: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"i","display":1}`); r.code != 409 {
		t.Fatalf("reuse a deleted ID: %d %s", r.code, r.raw)
	}
	if r := e.do("PATCH", in.item("i"), key, `{"expected_version":4,"display":1}`, "Idempotency-Key", "req-4"); r.code != 404 {
		t.Fatalf("PATCH a tombstone: %d %s", r.code, r.raw)
	}
}

// A tenant never reads or changes another tenant's item, even with the same ID.
func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{})
	a, b := e.apiKey("tenant-a"), e.apiKey("tenant-b")
	if r := e.do("POST", in.url+"/v1/catalog/items", a, `{"item_id":"same","display":"A"}`); r.code != 201 {
		t.Fatalf("A create: %d", r.code)
	}
	if r := e.do("GET", in.item("same"), a, ""); r.body["display"] != "A" {
		t.Fatalf("A GET: %s", r.raw)
	}
	if r := e.do("GET", in.item("same"), b, ""); r.code != 404 {
		t.Fatalf("B GET A's item: %d %s", r.code, r.raw)
	}
	if r := e.do("PATCH", in.item("same"), b, `{"expected_version":1,"display":"B!"}`, "Idempotency-Key", "x"); r.code != 404 {
		t.Fatalf("B PATCH A's item: %d %s", r.code, r.raw)
	}
	if r := e.do("DELETE", in.item("same")+"?expected_version=1", b, ""); r.code != 404 {
		t.Fatalf("B DELETE A's item: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", in.url+"/v1/catalog/items", b, `{"item_id":"same","display":"B"}`); r.code != 201 {
		t.Fatalf("B create its own: %d %s", r.code, r.raw)
	}
	// B's earlier 404 is negative-cached: its own write shows with min_version.
	if r := e.do("GET", in.item("same")+"?min_version=1", b, ""); r.body["display"] != "B" {
		t.Fatalf("B GET min_version=1: %s", r.raw)
	}
	// Both cached now; each tenant sees its own (also through L1).
	for range 4 {
		if r := e.do("GET", in.item("same"), a, ""); r.body["display"] != "A" {
			t.Fatalf("A GET: %s", r.raw)
		}
		if r := e.do("GET", in.item("same"), b, ""); r.body["display"] != "B" {
			t.Fatalf("B GET: %s", r.raw)
		}
	}
	// The same Idempotency-Key in two tenants is two requests.
	if r := e.do("PATCH", in.item("same"), a, `{"expected_version":1,"display":"A2"}`, "Idempotency-Key", "shared"); r.code != 200 {
		t.Fatalf("A PATCH: %d %s", r.code, r.raw)
	}
	if r := e.do("PATCH", in.item("same"), b, `{"expected_version":1,"display":"B2"}`, "Idempotency-Key", "shared"); r.code != 200 || r.body["display"] != "B2" {
		t.Fatalf("B PATCH: %d %s", r.code, r.raw)
	}
}

// Bad input is 400 with a JSON error and writes nothing.
func TestBadInputWritesNothing(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) { c.MaxBodyBytes = 1024 }})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"ok","display":1}`)
	big := `{"item_id":"big","display":"` + strings.Repeat("x", 2000) + `"}`
	cases := []struct{ method, url, body string }{
		{"POST", "/v1/catalog/items", `{"item_id":"a","display":`},
		{"POST", "/v1/catalog/items", `{"item_id":"a","display":1,"tenant_id":"evil"}`},
		{"POST", "/v1/catalog/items", `{"item_id":"a","display":1} {}`},
		{"POST", "/v1/catalog/items", `{"item_id":"","display":1}`},
		{"POST", "/v1/catalog/items", `{"item_id":"a\u0001","display":1}`},
		{"POST", "/v1/catalog/items", `{"item_id":"` + strings.Repeat("a", 300) + `","display":1}`},
		{"POST", "/v1/catalog/items", `{"item_id":"a"}`},
		{"POST", "/v1/catalog/items", big},
		{"POST", "/v1/catalog/items", `{"item_id":"nul","display":{"k":"a\u0000b"}}`}, // jsonb cannot hold U+0000
		{"POST", "/v1/catalog/items", `{"item_id":"nul","display":[{"\u0000":1}]}`},
		{"PATCH", "/v1/catalog/items/ok", `{"expected_version":1,"display":"\u0000"}`},
		{"PATCH", "/v1/catalog/items/ok", `{"expected_version":1}`},
		{"PATCH", "/v1/catalog/items/ok", `{"expected_version":"1","display":2}`},
		{"PATCH", "/v1/catalog/items/ok", `{"display":2}`},
		{"PATCH", "/v1/catalog/items/ok", `[]`},
		{"DELETE", "/v1/catalog/items/ok?expected_version=zero", ``},
		{"GET", "/v1/catalog/items/%01", ``},
	}
	for i, c := range cases {
		r := e.do(c.method, in.url+c.url, key, c.body, "Idempotency-Key", "bad-"+fmt.Sprint(i))
		if r.code != 400 || r.body["error"] == nil {
			t.Errorf("%s %s %.60q: %d %s, want 400 with a JSON error", c.method, c.url, c.body, r.code, r.raw)
		}
	}
	if n := e.count(`SELECT count(*) FROM catalog.items`); n != 1 {
		t.Fatalf("%d items, want 1", n)
	}
	if n := e.count(`SELECT version FROM catalog.items`); n != 1 {
		t.Fatalf("version %d, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM tidemark.requests`); n != 0 {
		t.Fatalf("%d stored requests, want 0", n)
	}
}
