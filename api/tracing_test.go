package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// serve starts a span per GET: a root that links a traced client's span
// instead of joining its trace, records the answer (Cache-Status, status
// code), and is the parent of the read path's spans (package reader's, whose
// TestTraceShowsLeaseWait checks what they hold): a miss has cache.lookup,
// source.read and cache.fill under it.
func TestGetTraceHoldsTheReadPath(t *testing.T) {
	e := newEnv(t)
	tracing, otlp := testenv.StartTracing(t, "tidemark-serve")
	in := e.instance(instOpts{tracer: tracing.Provider()})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'traced', 7, '{"v":7}')`)

	const client = "0af7651916cd43dd8448eb211c80319c"
	r := e.do("GET", in.item("traced"), key, "", "traceparent", "00-"+client+"-b7ad6b7169203331-01")
	if r.code != 200 || r.version() != 7 || r.cacheStatus() != "tidemark; fwd=miss; stored" {
		t.Fatalf("GET: %d %s, Cache-Status %q, want a stored miss", r.code, r.raw, r.header.Get("Cache-Status"))
	}
	if err := tracing.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var get testenv.Span
	testenv.Eventually(t, 10*time.Second, "the GET's trace received", func() error {
		var gets []testenv.Span
		for _, s := range otlp.Spans() {
			if s.Name == spanGet && s.Attrs[attrItem] == "traced" {
				gets = append(gets, s)
			}
		}
		if len(gets) != 1 {
			return fmt.Errorf("%d GET spans of item traced, want 1", len(gets))
		}
		get = gets[0]
		return nil
	})
	tr := otlp.Trace(get.TraceID)
	tree := testenv.Tree(tr, attrTenant, attrItem, attrCacheStatus, "http.response.status_code", "tidemark.lookup", "tidemark.stored")
	t.Logf("trace:\n%s", tree)
	if get.ParentID != "" || get.TraceID == client || len(get.Links) != 1 || get.Links[0] != client {
		t.Errorf("the GET joined the client's trace or lost it (parent %q, trace %s, links %v): want a root linking it", get.ParentID, get.TraceID, get.Links)
	}
	if get.Attrs[attrCacheStatus] != r.cacheStatus() || get.Attrs["http.response.status_code"] != "200" || get.Attrs[attrTenant] != "acme" || get.Kind != "SERVER" {
		t.Errorf("the GET span's kind %s, attributes %v: want SERVER, the answer's Cache-Status %q, status 200, tenant acme", get.Kind, get.Attrs, r.cacheStatus())
	}
	kids := map[string]int{}
	for _, s := range tr {
		if s.ParentID == get.SpanID {
			kids[s.Name]++
		}
	}
	if kids["cache.lookup"] != 1 || kids["source.read"] != 1 || kids["cache.fill"] != 1 {
		t.Errorf("the GET's children %v: want the read path's cache.lookup, source.read and cache.fill under it:\n%s", kids, tree)
	}
}
