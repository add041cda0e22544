package api

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// A process whose clock runs 2 s fast stops answering from the cache (reads
// go to the source, nothing is filled), its /readyz fails, and a fill made
// with its clock is refused by the cache tier.
func TestClockOffsetStopsCacheAnswers(t *testing.T) {
	e := newEnv(t)
	good := e.instance(instOpts{ccfg: longSoft})
	fast := e.instance(instOpts{ccfg: longSoft, clockOffset: 2 * time.Second})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'c', 5, '"five"')`)
	e.do("GET", good.item("c"), key, "")
	if r := e.do("GET", good.item("c"), key, ""); r.code != 200 || r.cacheStatus() != "tidemark; hit" {
		t.Fatalf("good clock: %d %s %v", r.code, r.raw, r.header)
	}
	if err := fast.srv.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "clock offset") {
		t.Fatalf("fast clock: Ready = %v, want a clock offset error", err)
	}
	if err := good.srv.Ready(context.Background()); err != nil {
		t.Fatalf("good clock: Ready = %v", err)
	}
	before := e.sourceReads()
	for range 3 {
		r := e.do("GET", fast.item("c"), key, "")
		if r.code != 200 || r.version() != 5 || r.cacheStatus() != "tidemark; fwd=miss; detail=clock" {
			t.Fatalf("fast clock: %d %s %v, want a source read", r.code, r.raw, r.header)
		}
	}
	if got := e.sourceReads() - before; got != 3 {
		t.Fatalf("fast clock: %d source reads, want 3", got)
	}
	// Its fills: a lease taken now, filled with an observation time from the
	// fast clock, is refused.
	cc := e.newCache(testCacheConfig())
	lr, err := cc.Lookup(context.Background(), "acme", "fresh", 0)
	if err != nil || lr.Status != cache.StatusMiss || lr.Token.IsZero() {
		t.Fatalf("lookup: %+v %v", lr, err)
	}
	err = cc.Fill(context.Background(), "acme", "fresh", lr.Token, 1, []byte(`"x"`), fast.srv.clock.Wall())
	var rej *cache.RejectedError
	if !errors.As(err, &rej) || rej.Reason != cache.ReasonClock {
		t.Fatalf("fill with the fast clock: %v, want a clock rejection", err)
	}
	if err := cc.Fill(context.Background(), "acme", "fresh", lr.Token, 1, []byte(`"x"`), good.srv.clock.Wall()); err != nil {
		t.Fatalf("fill with the good clock after the refusal: %v", err)
	}
}
