package reader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// Two deployments over one Postgres given different source pools (each
// its namespace, one Redis) share the source's one budget: each pool
// admits half of it, as the source counts its reads. A third pool's first
// process admits nothing until the other pools have cut to a third, and
// once pools leave, the one left takes the whole budget back.
func TestPoolsOnOneSourceShareItsBudget(t *testing.T) {
	r := newBudgetRig(t, 2000)
	const rate, burstWindow = 60.0, 100 * time.Millisecond
	mk := func(pool string, run bool) *Reader {
		return r.readerWith(r.serveClient(),
			func(c *Config) {
				c.SourcePool, c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = pool, rate, burstWindow, time.Second
			},
			func(c *cache.Config) { c.Namespace = pool }, run, func(d *Deps) { d.SourceDB = r.pool })
	}
	fg := func(rd *Reader) float64 { return rd.budget.rates.Load().settings.Foreground }
	a, b := mk("a", true), mk("b", false)
	stopB := runReader(t, b)
	// Both counted: whichever registered later was counted by the other,
	// whose read saw it.
	testenv.Eventually(t, 30*time.Second, "both pools registered and counted", func() error {
		return errors.Join(a.SourceErr(), b.SourceErr())
	})

	before := total(r.reads())
	elapsed := coldLoad(t, 3*time.Second, a, b)
	reads := total(r.reads()) - before
	perPool := int64(burstWindow/(time.Second/time.Duration(rate/2))) + 1 + int64(rate/2*elapsed.Seconds()) + 1
	t.Logf("source reads %d in %s through two pools at %v/s each (the source's budget allows %d)", reads, elapsed, rate, 2*perPool)
	if reads > 2*perPool || reads == 0 {
		t.Fatalf("source reads %d over %s through two pools, want 1 to %d: one budget, %v/s, for the source", reads, elapsed, 2*perPool, rate)
	}
	if fa, fb := fg(a), fg(b); fa != rate/2 || fb != rate/2 {
		t.Fatalf("two pools admit foreground at %v/s and %v/s, want half the budget each, %v/s", fa, fb, rate/2)
	}

	// A third pool's first process: registered, it holds until the others
	// have counted it (and so cut their share).
	c := mk("c", false)
	if err := c.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.SourceErr(); err == nil {
		t.Fatal("a new pool's process is ready before the other pools have counted it")
	}
	_, err := c.budget.acquire(context.Background(), ClassForeground, "acme")
	if be := (*BudgetError)(nil); !errors.As(err, &be) || !strings.Contains(be.Why, "counted") {
		t.Fatalf("a new pool's process admitted a source read before the other pools counted it: %v", err)
	}
	stopC := runReader(t, c)
	testenv.Eventually(t, 30*time.Second, "the new pool's process is counted", c.SourceErr)
	// The others cut when they read the row that counts it (milliseconds
	// after the new process can see their rows refreshed).
	testenv.Eventually(t, time.Second, "every pool admits a third of the budget once the new one admits", func() error {
		if fa, fb, fc := fg(a), fg(b), fg(c); fa != rate/3 || fb != rate/3 || fc != rate/3 {
			return fmt.Errorf("admitting foreground at %v/s, %v/s and %v/s", fa, fb, fc)
		}
		return nil
	})

	live, err := LiveSourceShares(context.Background(), r.pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(live); !strings.HasPrefix(got, "[{a ") || !strings.Contains(got, " 1} {b ") || !strings.Contains(got, " 1} {c ") || len(live) != 3 {
		t.Fatalf("the source's live shares are %s, want pools a, b and c with one process each", got)
	}

	stopC()
	stopB()
	testenv.Eventually(t, 30*time.Second, "the pool left alone takes the whole budget back", func() error {
		if fa := fg(a); fa != rate {
			return fmt.Errorf("admitting foreground at %v/s", fa)
		}
		return nil
	})
}

// One pool's serve processes on two Redis deployments (two Helm releases
// over one database, each with its own cache tier, both on the default
// pool) admit from two sets of buckets: each admits half the source's
// budget. After a Redis loses its data (a restart without persistence),
// its processes take up new buckets and the source counts them apart.
func TestOnePoolOnTwoRedisSharesTheSourceBudget(t *testing.T) {
	r := newBudgetRig(t, 2000)
	other := testenv.StartRedis(t)
	const rate, burstWindow = 60.0, 100 * time.Millisecond
	mk := func(rdb redis.UniversalClient) *Reader {
		return r.readerWith(rdb,
			func(c *Config) { c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = rate, burstWindow, time.Second },
			nil, true, func(d *Deps) { d.SourceDB = r.pool })
	}
	otherClient, err := cache.ParseRedisURL(other.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { otherClient.Close() })
	a, b := mk(r.serveClient()), mk(otherClient)
	testenv.Eventually(t, 30*time.Second, "both processes registered and counted", func() error {
		return errors.Join(a.SourceErr(), b.SourceErr())
	})
	before := total(r.reads())
	elapsed := coldLoad(t, 3*time.Second, a, b)
	reads := total(r.reads()) - before
	perShare := int64(burstWindow/(time.Second/time.Duration(rate/2))) + 1 + int64(rate/2*elapsed.Seconds()) + 1
	t.Logf("source reads %d in %s through one pool on two Redis at %v/s (the source's budget allows %d)", reads, elapsed, rate, 2*perShare)
	if reads > 2*perShare || reads == 0 {
		t.Fatalf("source reads %d over %s through one pool on two Redis, want 1 to %d: one budget, %v/s, for the source", reads, elapsed, 2*perShare, rate)
	}
	if sa, sb := shares(a), shares(b); sa != 2 || sb != 2 {
		t.Fatalf("one pool on two Redis: %d and %d shares seen, want 2", sa, sb)
	}

	// The second Redis loses its data: its process registers the new
	// buckets in place of the old ones.
	registered := func() string {
		b.source.mu.Lock()
		defer b.source.mu.Unlock()
		return b.source.state.registered
	}
	old := registered()
	if err := otherClient.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the process on the flushed Redis registers its new buckets", func() error {
		id, err := otherClient.Get(context.Background(), b.procs.idKey).Result()
		if err != nil {
			return err
		}
		if reg := registered(); id == old || reg != id {
			return fmt.Errorf("buckets %q before the flush, %q now, registered %q", old, id, reg)
		}
		return b.SourceErr()
	})
	testenv.Eventually(t, 10*time.Second, "both see two shares again", func() error {
		if sa, sb := shares(a), shares(b); sa != 2 || sb != 2 {
			return fmt.Errorf("%d and %d shares seen", sa, sb)
		}
		return nil
	})
}

// shares is the sets of buckets rd's budget last saw on the source.
func shares(rd *Reader) int {
	rd.budget.agreeMu.Lock()
	defer rd.budget.agreeMu.Unlock()
	return rd.budget.sourceShares
}

// coldLoad reads distinct rig items through readers, six workers each,
// for d, and returns how long it took.
func coldLoad(t *testing.T, d time.Duration, readers ...*Reader) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var next atomic.Int64
	start := time.Now()
	for _, rd := range readers {
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < d {
					rd.Get(context.Background(), Query{Tenant: "acme", Item: fmt.Sprintf("c%d", 1+next.Add(1)%2000)})
				}
			}()
		}
	}
	wg.Wait()
	return time.Since(start)
}

// runReader runs rd until the returned stop is called (or the test ends).
func runReader(t *testing.T, rd *Reader) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rd.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
