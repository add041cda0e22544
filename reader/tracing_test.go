package reader

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// waitSignal is a reader's cache tier that closes waiting the first time
// a Lookup answers "wait" (another reader holds the key's lease).
type waitSignal struct {
	Cache
	once    sync.Once
	waiting chan struct{}
}

func (w *waitSignal) Lookup(ctx context.Context, tenant, item string, minVersion int64) (cache.LookupResult, error) {
	lr, err := w.Cache.Lookup(ctx, tenant, item, minVersion)
	if err == nil && lr.Status == cache.StatusWait {
		w.once.Do(func() { close(w.waiting) })
	}
	return lr, err
}

// A read that finds another process's lease waits for its fill: under the
// caller's span (received by an OTLP/HTTP receiver) it has one cache.lookup
// child that answered "wait" and one lease.wait child covering the wait;
// the filling process's read has cache.lookup (miss), source.read and
// cache.fill under its span. api's TestGetTraceHoldsTheReadPath checks that
// serve starts that span per GET.
func TestTraceShowsLeaseWait(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	tracing, otlp := testenv.StartTracing(t, "tidemark-reader-test")

	src := newMemSource()
	src.set("acme", "waited", 7, `{"v":7}`)
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	src.afterRead = func(_, item string, _ Item) {
		if item == "waited" {
			once.Do(func() { close(paused); <-resume })
		}
	}
	// The budget is not what this tests: a fresh one admits a read every
	// 1 µs after its first.
	long := func(c *Config) { c.RequestTimeout, c.ForegroundRate = 20*time.Second, 1e6 }
	leaseLong := func(c *cache.Config) { c.Lease = 10 * time.Second }
	traced := func(d *Deps) { d.Tracer = tracing.Provider() }
	filler := newTestReaderWith(t, rdb, src, long, leaseLong, traced)
	signal := &waitSignal{waiting: make(chan struct{})}
	waiter := newTestReaderWith(t, rdb, src, long, leaseLong, func(d *Deps) {
		traced(d)
		signal.Cache = d.Cache
		d.Cache = signal
	})
	getAdmitted(t, filler, Query{Tenant: "acme", Item: "warm"}) // a fresh budget starts empty

	// read is one traced read: the caller's root span, the reader's path
	// under it.
	tracer := tracing.Provider().Tracer("reader-test")
	read := func(rd *Reader, who string) Result {
		ctx, span := tracer.Start(context.Background(), "read", trace.WithNewRoot(),
			trace.WithAttributes(attribute.String("who", who)))
		defer span.End()
		r := rd.Get(ctx, Query{Tenant: "acme", Item: "waited"})
		span.SetAttributes(attribute.String("cache_status", r.CacheStatus))
		return r
	}
	first := make(chan Result, 1)
	go func() { first <- read(filler, "filler") }()
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the filler's read never reached the source")
	}
	second := make(chan Result, 1)
	go func() { second <- read(waiter, "waiter") }()
	select {
	case <-signal.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's lookup never answered wait")
	}
	time.Sleep(200 * time.Millisecond) // the wait the lease.wait span must cover
	close(resume)
	if r := <-first; r.Kind != Found || r.Version != 7 {
		t.Fatalf("filler's read: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
	if r := <-second; r.Kind != Found || r.CacheStatus != "tidemark; hit; detail=waited" {
		t.Fatalf("waiter's read: %d version %d %q, want a hit after waiting", r.Kind, r.Version, r.CacheStatus)
	}
	if err := tracing.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	roots := map[string]testenv.Span{}
	testenv.Eventually(t, 10*time.Second, "both reads' traces received", func() error {
		for _, s := range otlp.Spans() {
			if s.Name == "read" {
				roots[s.Attrs["who"]] = s
			}
		}
		if len(roots) != 2 {
			return fmt.Errorf("root spans of %d reads, want the filler's and the waiter's", len(roots))
		}
		return nil
	})
	for who, root := range roots {
		tr := otlp.Trace(root.TraceID)
		tree := testenv.Tree(tr, "who", "cache_status", attrLookup, attrClass, attrStored)
		t.Logf("%s's trace:\n%s", who, tree)
		kids := map[string][]testenv.Span{}
		for _, s := range tr {
			if s.ParentID == root.SpanID {
				kids[s.Name] = append(kids[s.Name], s)
			}
		}
		switch who {
		case "waiter":
			if len(kids[spanLookup]) != 1 || kids[spanLookup][0].Attrs[attrLookup] != "wait" || len(kids[spanLeaseWait]) != 1 || len(kids[spanSource]) != 0 {
				t.Errorf("the waiter's read: want one cache.lookup answering wait and one lease.wait, no source read:\n%s", tree)
			}
			if w := kids[spanLeaseWait]; len(w) == 1 && w[0].End.Sub(w[0].Start) < 100*time.Millisecond {
				t.Errorf("lease.wait lasted %s, want it to cover the 200 ms the filler was held", w[0].End.Sub(w[0].Start))
			}
		case "filler":
			if len(kids[spanLookup]) != 1 || kids[spanLookup][0].Attrs[attrLookup] != "miss" || len(kids[spanSource]) != 1 ||
				len(kids[spanFill]) != 1 || kids[spanFill][0].Attrs[attrStored] != "true" {
				t.Errorf("the filler's read: want cache.lookup (miss), source.read and cache.fill (stored):\n%s", tree)
			}
		}
	}
}
