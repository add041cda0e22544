package dev

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// traceAttrs are the attributes the rendered trees show.
var traceAttrs = []string{"tidemark.item_id", "tidemark.version", "tidemark.lookup", "tidemark.budget_class", "tidemark.stored",
	"tidemark.result", "tidemark.cache_status", "http.response.status_code", "messaging.kafka.offset"}

// TestTracesFollowAGetAndAChange runs capture, apply and serve as real
// processes exporting every trace (--trace-sample-ratio 1) to an OTLP/HTTP
// receiver in the test, the collector's protocol. One change committed in
// SQL is one trace: capture.change (capture) → kafka.produce (capture, its
// context in the record's traceparent header) → apply.change (apply) →
// cache.INVALIDATE. One GET of a cold item is one trace: the GET span with
// the item ID as an attribute, its L1 event, and children cache.lookup
// (miss), source.read and cache.fill (stored). The item ID is in no metric.
func TestTracesFollowAGetAndAChange(t *testing.T) {
	t.Parallel()
	otlp := testenv.StartOTLP(t)
	e := newE2E(t, func(e *e2e) {
		for _, p := range []*proc{e.capture, e.applier, e.serve} {
			p.args = append(p.args, "--trace-endpoint", otlp.URL(), "--trace-sample-ratio", "1")
		}
	})
	ctx := testenv.Context(t, 2*time.Minute)
	k := e.keys[0]

	// One change, end to end.
	const changed = "item-01234"
	var version int64
	if err := e.pool.QueryRow(ctx, `UPDATE catalog.items SET version = version + 1, updated_at = now() WHERE tenant_id = $1 AND item_id = $2 RETURNING version`,
		k.tenant, changed).Scan(&version); err != nil {
		t.Fatal(err)
	}
	var change []testenv.Span
	testenv.Eventually(t, 60*time.Second, "the change's trace from capture to INVALIDATE", func() error {
		root, ok := findSpan(otlp.Spans(), "capture.change", changed, fmt.Sprint(version))
		if !ok {
			return fmt.Errorf("no capture.change span for %s v%d among %d spans", changed, version, len(otlp.Spans()))
		}
		change = otlp.Trace(root.TraceID)
		return expectTree(change, []wantSpan{
			{name: "capture.change", service: "tidemark-capture", kind: "INTERNAL", attrs: map[string]string{"tidemark.item_id": changed, "tidemark.tenant": k.tenant, "tidemark.op": "upsert"}},
			{name: "kafka.produce", parent: "capture.change", service: "tidemark-capture", kind: "PRODUCER", attrs: map[string]string{"messaging.destination.name": e.topic}},
			{name: "apply.change", parent: "kafka.produce", service: "tidemark-apply", kind: "CONSUMER", attrs: map[string]string{"tidemark.item_id": changed, "tidemark.result": "applied"}},
			{name: "cache.INVALIDATE", parent: "apply.change", service: "tidemark-apply", kind: "CLIENT", attrs: map[string]string{"tidemark.item_id": changed, "tidemark.version": fmt.Sprint(version), "tidemark.result": "applied"}},
		})
	})
	t.Logf("trace of one change (%s v%d):\n%s", changed, version, testenv.Tree(change, traceAttrs...))

	// One GET of an item nobody has read yet.
	const cold = "item-01777"
	if code, _, err := e.get(k, cold); err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", cold, code, err)
	}
	var get []testenv.Span
	testenv.Eventually(t, 30*time.Second, "the GET's trace", func() error {
		root, ok := findSpan(otlp.Spans(), "GET /v1/catalog/items/{id}", cold, "")
		if !ok {
			return fmt.Errorf("no GET span for %s", cold)
		}
		get = otlp.Trace(root.TraceID)
		if !contains(root.Events, "l1") {
			return fmt.Errorf("GET span has events %v, want the l1 lookup", root.Events)
		}
		return expectTree(get, []wantSpan{
			{name: "GET /v1/catalog/items/{id}", service: "tidemark-serve", kind: "SERVER",
				attrs: map[string]string{"tidemark.item_id": cold, "tidemark.tenant": k.tenant, "http.response.status_code": "200", "tidemark.cache_status": "tidemark; fwd=miss; stored"}},
			{name: "cache.lookup", parent: "GET /v1/catalog/items/{id}", service: "tidemark-serve", kind: "CLIENT", attrs: map[string]string{"tidemark.lookup": "miss"}},
			{name: "source.read", parent: "GET /v1/catalog/items/{id}", service: "tidemark-serve", kind: "CLIENT", attrs: map[string]string{"tidemark.budget_class": "foreground", "tidemark.found": "true"}},
			{name: "cache.fill", parent: "GET /v1/catalog/items/{id}", service: "tidemark-serve", kind: "CLIENT", attrs: map[string]string{"tidemark.stored": "true"}},
		})
	})
	t.Logf("trace of one GET (%s, a miss):\n%s", cold, testenv.Tree(get, traceAttrs...))

	// Item IDs go into traces, never into metric labels.
	for _, p := range []struct{ name, addr string }{{"serve", e.serveMetrics}} {
		resp, err := http.Get("http://" + p.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), cold) || strings.Contains(string(b), changed) {
			t.Errorf("%s's /metrics names an item ID", p.name)
		}
	}
}

// wantSpan is one span a trace must hold: its parent by name ("" for the
// root), service, kind and attributes.
type wantSpan struct {
	name, parent, service, kind string
	attrs                       map[string]string
}

// expectTree checks that spans hold exactly one span of each wanted name,
// under the wanted parent, with the wanted service, kind and attributes.
func expectTree(spans []testenv.Span, want []wantSpan) error {
	byName := map[string][]testenv.Span{}
	byID := map[string]testenv.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		byID[s.SpanID] = s
	}
	for _, w := range want {
		got := byName[w.name]
		if len(got) != 1 {
			return fmt.Errorf("%d spans named %s, want 1; the trace so far:\n%s", len(got), w.name, testenv.Tree(spans, traceAttrs...))
		}
		s := got[0]
		switch {
		case w.parent == "" && s.ParentID != "":
			return fmt.Errorf("%s has a parent %s, want it the root", w.name, s.ParentID)
		case w.parent != "" && byID[s.ParentID].Name != w.parent:
			return fmt.Errorf("%s's parent is %q, want %s; the trace so far:\n%s", w.name, byID[s.ParentID].Name, w.parent, testenv.Tree(spans, traceAttrs...))
		case s.Service != w.service:
			return fmt.Errorf("%s is from service %q, want %s", w.name, s.Service, w.service)
		case s.Kind != w.kind:
			return fmt.Errorf("%s is of kind %s, want %s", w.name, s.Kind, w.kind)
		}
		for k, v := range w.attrs {
			if s.Attrs[k] != v {
				return fmt.Errorf("%s has %s=%q, want %q (attributes %v)", w.name, k, s.Attrs[k], v, s.Attrs)
			}
		}
	}
	return nil
}

// findSpan is the first span named name for item (and version, unless "").
func findSpan(spans []testenv.Span, name, item, version string) (testenv.Span, bool) {
	for _, s := range spans {
		if s.Name == name && s.Attrs["tidemark.item_id"] == item && (version == "" || s.Attrs["tidemark.version"] == version) {
			return s, true
		}
	}
	return testenv.Span{}, false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
