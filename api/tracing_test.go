package api

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/reader"
)

// A GET that finds another process's lease waits for its fill: its trace,
// received by an OTLP/HTTP receiver, is the GET span with a cache.lookup
// child that answered "wait" and one lease.wait child covering the wait;
// the filling process's GET has cache.lookup (miss), source.read and
// cache.fill under it. A GET from a traced client links the client's
// span instead of joining its trace.
func TestGetTraceShowsLeaseWait(t *testing.T) {
	e := newEnv(t)
	otlp := testenv.StartOTLP(t)
	tcfg := telemetry.DefaultTraceConfig()
	tcfg.Endpoint, tcfg.SampleRatio, tcfg.Service, tcfg.BatchTimeout = otlp.URL(), 1, "tidemark-serve", 50*time.Millisecond
	tracing, err := telemetry.NewTracing(tcfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithCancel(context.Background())
	t.Cleanup(func() { tcancel(); _ = tracing.Run(tctx) })
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	long := func(c *Config) { c.RequestTimeout = 20 * time.Second }
	leaseLong := func(c *cache.Config) { c.Lease = 10 * time.Second }
	filler := e.instance(instOpts{cfg: long, ccfg: leaseLong, tracer: tracing.Provider(), hooks: func(s *Server) {
		s.afterSourceRead = func(tenant, item string, it reader.Item) {
			if item == "waited" {
				once.Do(func() { close(paused); <-resume })
			}
		}
	}})
	waiter := e.instance(instOpts{cfg: long, ccfg: leaseLong, tracer: tracing.Provider()})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'waited', 7, '{"v":7}')`)

	first := make(chan resp, 1)
	go func() { first <- e.do("GET", filler.item("waited"), key, "") }()
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the filler's GET never reached the source")
	}
	second := make(chan resp, 1)
	go func() {
		second <- e.do("GET", waiter.item("waited"), key, "", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	}()
	time.Sleep(200 * time.Millisecond) // the waiter polls its lease answer meanwhile
	close(resume)
	if r := <-first; r.code != 200 || r.version() != 7 {
		t.Fatalf("filler's GET: %d %s", r.code, r.raw)
	}
	r := <-second
	if r.code != 200 || r.cacheStatus() != "tidemark; hit; detail=waited" {
		t.Fatalf("waiter's GET: %d %s, Cache-Status %q, want a hit after waiting", r.code, r.raw, r.header.Get("Cache-Status"))
	}
	if err := tracing.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var gets []testenv.Span
	testenv.Eventually(t, 10*time.Second, "both GETs' traces received", func() error {
		gets = gets[:0]
		for _, s := range otlp.Spans() {
			if s.Name == spanGet && s.Attrs[attrItem] == "waited" {
				gets = append(gets, s)
			}
		}
		if len(gets) != 2 {
			return fmt.Errorf("%d GET spans of item waited, want 2", len(gets))
		}
		return nil
	})
	for _, g := range gets {
		tr := otlp.Trace(g.TraceID)
		tree := testenv.Tree(tr, attrItem, attrLookup, attrClass, attrStored, attrCacheStatus)
		t.Logf("trace:\n%s", tree)
		kids := map[string][]testenv.Span{}
		for _, s := range tr {
			if s.ParentID == g.SpanID {
				kids[s.Name] = append(kids[s.Name], s)
			}
		}
		switch g.Attrs[attrCacheStatus] {
		case "tidemark; hit; detail=waited":
			if len(kids[spanLookup]) != 1 || kids[spanLookup][0].Attrs[attrLookup] != "wait" || len(kids[spanLeaseWait]) != 1 || len(kids[spanSource]) != 0 {
				t.Errorf("the waiter's GET: want one cache.lookup answering wait and one lease.wait, no source read:\n%s", tree)
			}
			if w := kids[spanLeaseWait]; len(w) == 1 && w[0].End.Sub(w[0].Start) < 100*time.Millisecond {
				t.Errorf("lease.wait lasted %s, want it to cover the 200 ms the filler was held", w[0].End.Sub(w[0].Start))
			}
			if g.ParentID != "" || g.TraceID == "0af7651916cd43dd8448eb211c80319c" || len(g.Links) != 1 || g.Links[0] != "0af7651916cd43dd8448eb211c80319c" {
				t.Errorf("the GET joined the client's trace or lost it (parent %q, trace %s, links %v): want a root linking it", g.ParentID, g.TraceID, g.Links)
			}
		case "tidemark; fwd=miss; stored":
			if len(kids[spanLookup]) != 1 || kids[spanLookup][0].Attrs[attrLookup] != "miss" || len(kids[spanSource]) != 1 ||
				len(kids[spanFill]) != 1 || kids[spanFill][0].Attrs[attrStored] != "true" {
				t.Errorf("the filler's GET: want cache.lookup (miss), source.read and cache.fill (stored):\n%s", tree)
			}
		default:
			t.Errorf("a GET span with Cache-Status %q:\n%s", g.Attrs[attrCacheStatus], tree)
		}
	}
}

// The names of the read path's spans and attributes (package reader's).
const (
	spanLookup    = "cache.lookup"
	spanLeaseWait = "lease.wait"
	spanSource    = "source.read"
	spanFill      = "cache.fill"
	attrLookup    = "tidemark.lookup"
	attrClass     = "tidemark.budget_class"
	attrStored    = "tidemark.stored"
)
