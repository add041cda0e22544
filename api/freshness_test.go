package api

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// An invalidated value whose source stalls (Postgres paused) across its hard
// deadline, with concurrent readers joining each other's resolutions: no 200
// is answered after the deadline, and no answer waits longer than the
// request and source timeouts allow.
func TestStalledSourceNeverServesPastHardDeadline(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := newEnvDSN(t, pg.MigratedDatabase(t))
	const hard = 3 * time.Second
	in := e.instance(instOpts{
		cfg: func(c *Config) {
			c.RequestTimeout, c.SourceTimeout, c.LookupTimeout, c.L1Size = 3*time.Second, time.Second, time.Second, 0
		},
		ccfg: func(c *cache.Config) {
			c.HardLifetime, c.SoftMin, c.SoftMax, c.NegativeTTL, c.Lease = hard, hard, hard, time.Second, 500*time.Millisecond
		},
	})
	applier := e.newCache(testCacheConfig())
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'st', 1, '"one"')`)
	if r := e.do("GET", in.item("st"), key, ""); r.code != 200 || r.cacheStatus() != "tidemark; fwd=miss; stored" {
		t.Fatalf("cold GET: %d %s %v", r.code, r.raw, r.header)
	}
	filled := time.Now() // the value's observation is before this
	// v2 committed and applied, but the source now stalls: every reader of the
	// invalidated v1 tries the source, and v1 is only a fallback.
	if _, err := applier.Invalidate(context.Background(), "acme", "st", 2); err != nil {
		t.Fatal(err)
	}
	pg.Pause()
	t.Cleanup(pg.Resume)

	var (
		mu                    sync.Mutex
		served, late, refused int
		slowest               time.Duration
	)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(filled) < hard+2*time.Second {
				sent := time.Now()
				r := e.do("GET", in.item("st"), key, "")
				got := time.Now()
				mu.Lock()
				slowest = max(slowest, got.Sub(sent))
				switch r.code {
				case 200:
					served++
					if got.After(filled.Add(hard + 100*time.Millisecond)) {
						late++
						t.Errorf("200 received %s after the fill (hard lifetime %s): %v %s", got.Sub(filled), hard, r.header, r.raw)
					}
				case 503:
					refused++
				default:
					t.Errorf("GET: %d %s", r.code, r.raw)
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	t.Logf("served %d, refused %d, late %d, slowest answer %s", served, refused, late, slowest)
	if served == 0 || refused == 0 {
		t.Fatalf("served %d, refused %d: want both (the fallback before the deadline, 503 after)", served, refused)
	}
	// Request deadline, then at most one fresh read bounded by the source
	// timeout (plus its client-side margin), plus scheduling slack.
	if limit := 3*time.Second + 1200*time.Millisecond + 1500*time.Millisecond; slowest > limit {
		t.Fatalf("slowest answer %s with the source paused, limit %s", slowest, limit)
	}
}

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
