package api

import (
	"context"
	"testing"
	"time"
)

// Idempotency records older than the retention are deleted; younger ones,
// and their replays, stay.
func TestIdempotencyRecordsPruned(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) { c.IdempotencyRetention = time.Hour }})
	key := e.apiKey("acme")
	e.do("POST", in.url+"/v1/catalog/items", key, `{"item_id":"i","display":1}`)
	if r := e.do("PATCH", in.item("i"), key, `{"expected_version":1,"display":2}`, "Idempotency-Key", "fresh"); r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.raw)
	}
	e.exec(`INSERT INTO tidemark.requests (tenant_id, request_id, body_sha256, status, response, created_at)
		SELECT 'acme', 'old' || g, '\x00', 200, '{}', now() - interval '2 hours' FROM generate_series(1, 12000) g`)
	n, err := in.srv.pruneRequests(context.Background())
	if err != nil || n != 12000 {
		t.Fatalf("pruned %d (%v), want 12000", n, err)
	}
	if left := e.count(`SELECT count(*) FROM tidemark.requests WHERE request_id LIKE 'old%'`); left != 0 {
		t.Fatalf("%d expired records left", left)
	}
	r := e.do("PATCH", in.item("i"), key, `{"expected_version":1,"display":2}`, "Idempotency-Key", "fresh")
	if r.code != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of a record within the retention: %d %v %s", r.code, r.header, r.raw)
	}
}
