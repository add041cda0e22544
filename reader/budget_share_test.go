package reader

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// With the foreground budget at 50/s, 2,000 distinct cold keys at once get
// at most burst + 50/s source reads across two readers of one pool; the
// rest are Unavailable with a RetryAfter.
func TestBudgetBoundsSourceReads(t *testing.T) {
	r := newBudgetRig(t, 2000)
	const rate, burstWindow = 50.0, 100 * time.Millisecond
	var rds []*Reader
	for range 2 { // two processes share one budget
		rds = append(rds, r.reader(r.serveClient(), func(c *Config) {
			c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = rate, burstWindow, time.Second
		}))
	}
	before := total(r.reads())

	// 400 reads in flight at a time, as many as api's test client let
	// through (its MaxConnsPerHost): more only queue for Redis connections.
	const n, inFlight = 2000, 400
	var wg sync.WaitGroup
	var mu sync.Mutex
	kinds, unavailable := map[Kind]int{}, map[string]int{}
	slots := make(chan struct{}, inFlight)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			res := rds[i%2].Get(context.Background(), Query{Tenant: "acme", Item: fmt.Sprintf("c%d", i+1)})
			if res.Kind == Unavailable && res.RetryAfter <= 0 {
				t.Errorf("Unavailable without a RetryAfter: %q", res.CacheStatus)
			}
			mu.Lock()
			kinds[res.Kind]++
			if res.Kind == Unavailable {
				unavailable[res.CacheStatus]++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := total(r.reads()) - before
	burst := int64(burstWindow/(time.Second/time.Duration(rate))) + 1
	limit := burst + int64(rate*elapsed.Seconds()) + 1
	t.Logf("kinds (Found %d, Unavailable %d) %v, source reads %d in %s (limit %d); Unavailable by Cache-Status %v", Found, Unavailable, kinds, reads, elapsed, limit, unavailable)
	if kinds[Found]+kinds[Unavailable] != n {
		t.Fatalf("answers other than Found and Unavailable: %v", kinds)
	}
	if reads > limit {
		t.Fatalf("source reads %d exceed the budget %d (burst %d + %v/s over %s)", reads, limit, burst, rate, elapsed)
	}
	if reads == 0 || kinds[Unavailable] == 0 || int64(kinds[Found]) > reads {
		t.Fatalf("implausible: %d reads, kinds %v", reads, kinds)
	}
}

// Readers of two cache namespaces (an upgrade in progress) that name the
// same source pool share one budget, not one each.
func TestBudgetOnePoolAcrossNamespaces(t *testing.T) {
	r := newBudgetRig(t, 2000)
	const rate, burstWindow = 50.0, 100 * time.Millisecond
	var rds []*Reader
	for _, ns := range []string{"catalog", "catalog2"} {
		rds = append(rds, r.readerOf(r.serveClient(),
			func(c *Config) { c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = rate, burstWindow, time.Second },
			func(c *cache.Config) { c.Namespace = ns }, true))
	}
	before := total(r.reads())
	var wg sync.WaitGroup
	var mu sync.Mutex
	kinds := map[Kind]int{}
	start := time.Now()
	// Sustained load on both namespaces, so each would spend a budget of
	// its own if it had one.
	var next atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 4*time.Second {
				res := rds[w%2].Get(context.Background(), Query{Tenant: "acme", Item: fmt.Sprintf("c%d", 1+next.Add(1)%2000)})
				mu.Lock()
				kinds[res.Kind]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := total(r.reads()) - before
	limit := int64(burstWindow/(time.Second/time.Duration(rate))) + 1 + int64(rate*elapsed.Seconds()) + 1
	t.Logf("kinds (Found %d, Unavailable %d) %v, source reads %d in %s (one pool's limit %d)", Found, Unavailable, kinds, reads, elapsed, limit)
	if reads > limit {
		t.Fatalf("source reads %d exceed one pool's budget %d over %s: each namespace got its own", reads, limit, elapsed)
	}
	if reads == 0 || kinds[Unavailable] == 0 {
		t.Fatalf("implausible: %d reads, kinds %v", reads, kinds)
	}
}

// One tenant floods min_version reads of random ids as fast as it can; a
// second tenant's cold visitor reads and its own read-your-writes reads are
// still answered (at least 99 %): min_version reads have their own class,
// and inside a class each active tenant gets its share.
func TestMinVersionFloodCannotStarveOtherTenant(t *testing.T) {
	r := newBudgetRig(t, 2000)
	const fgRate, rywRate = 200.0, 100.0
	rd := r.reader(r.serveClient(), func(c *Config) {
		c.ForegroundRate, c.ReadYourWritesRate, c.BudgetBurst = fgRate, rywRate, 100*time.Millisecond
		// Generous deadlines: a loaded -race box must not turn slowness into
		// refusals; the property here is the budget.
		c.RequestTimeout, c.SourceTimeout, c.LookupTimeout, c.InFlightWait = 10*time.Second, 5*time.Second, 5*time.Second, 5*time.Second
	})
	waitCounted(t, 1, rd)

	// The flood (tenant t1) runs until the other tenant (t2) has sent all
	// its reads.
	var calmDone atomic.Bool
	start := time.Now()
	var floodSent, floodAdmitted, floodRefused atomic.Int64
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !calmDone.Load() {
				res := rd.Get(context.Background(), Query{Tenant: "t1", Item: fmt.Sprintf("f%d", rand.Int64()), MinVersion: 1})
				floodSent.Add(1)
				switch res.Kind {
				case NotFound:
					floodAdmitted.Add(1)
				case Unavailable:
					floodRefused.Add(1)
				default:
					t.Errorf("flood: %d %q", res.Kind, res.CacheStatus)
				}
			}
		}()
	}
	// The calm tenant: up to 25 cold visitor reads/s and 25 min_version
	// reads/s, 100 of each, each of a different item.
	var mu sync.Mutex
	ok, all := map[string]int{}, map[string]int{}
	var next atomic.Int64
	var calm sync.WaitGroup
	for _, kind := range []string{"visitor", "read_your_writes"} {
		calm.Add(1)
		go func() {
			defer calm.Done()
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			time.Sleep(200 * time.Millisecond) // the flood is on
			for range 100 {
				q := Query{Tenant: "t2", Item: fmt.Sprintf("c%d", next.Add(1))}
				if kind == "read_your_writes" {
					q.MinVersion = 1
				}
				res := rd.Get(context.Background(), q)
				mu.Lock()
				all[kind]++
				if res.Kind == Found {
					ok[kind]++
				} else {
					t.Logf("calm %s: %d %q", kind, res.Kind, res.CacheStatus)
				}
				mu.Unlock()
				<-tick.C
			}
		}()
	}
	calm.Wait()
	calmDone.Store(true)
	wg.Wait()
	secs := time.Since(start).Seconds()
	t.Logf("flooding tenant: %d min_version reads (%.0f/s), %d source reads admitted (%.0f/s; class rate %.0f/s), %d refused",
		floodSent.Load(), float64(floodSent.Load())/secs, floodAdmitted.Load(), float64(floodAdmitted.Load())/secs, rywRate, floodRefused.Load())
	for _, kind := range []string{"visitor", "read_your_writes"} {
		ratio := float64(ok[kind]) / float64(all[kind])
		t.Logf("other tenant %s reads: %d/%d answered (%.2f %%)", kind, ok[kind], all[kind], 100*ratio)
		if ratio < 0.99 {
			t.Errorf("other tenant %s reads: %d/%d answered, want at least 99 %%", kind, ok[kind], all[kind])
		}
	}
	if floodRefused.Load() == 0 {
		t.Fatal("the flood was never refused: it did not reach the budget")
	}
}

// A tenant alone spends the read-your-writes class to its end; a second
// tenant then arrives asking within its share: its first read and every one
// after it are admitted, while the first tenant keeps asking as fast as it is
// let. (A lone tenant's bucket follows the class and leaves it one read;
// what it owes is rescaled to its share when the second tenant arrives.)
func TestNewTenantGetsItsShareOfClassSpentByLoneTenant(t *testing.T) {
	r := newBudgetRig(t, 1)
	const rate = 10.0 // one read per 100 ms: wide margins on a loaded box
	b := r.reader(r.serveClient(), func(c *Config) {
		c.ReadYourWritesRate, c.BudgetBurst, c.LookupTimeout = rate, time.Second, 5*time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lone tenant: 12 admissions (more than the class's burst of 10,
	// which starts empty), so the class is spent to its end.
	for i := range 12 {
		release, err := b.AcquireWait(ctx, ClassReadYourWrites, "flood", 1)
		if err != nil {
			t.Fatalf("flood admission %d: %v", i, err)
		}
		release()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // and it keeps asking
		defer wg.Done()
		for ctx.Err() == nil {
			if release, err := b.AcquireWait(ctx, ClassReadYourWrites, "flood", 1); err == nil {
				release()
			}
		}
	}()
	// The newcomer: 8 reads, the second 150 ms after the first (the class has
	// freed one read by then, which the first tenant, at its new share, must
	// leave), then one per 250 ms (under its share of 5/s).
	refused := 0
	for i := range 8 {
		release, err := b.Acquire(ctx, ClassReadYourWrites, "calm")
		if err != nil {
			refused++
			t.Logf("newcomer read %d: %v", i, err)
		} else {
			release()
		}
		if i == 0 {
			time.Sleep(150 * time.Millisecond)
		} else {
			time.Sleep(250 * time.Millisecond)
		}
	}
	cancel()
	wg.Wait()
	if refused > 0 {
		t.Fatalf("the newcomer was refused %d of 8 reads within its share of a class another tenant had spent", refused)
	}
}

// Two serve processes of one pool configured with different budgets (one
// Helm release's values, a typo in one pod): both admit at the lowest of
// each setting, so the one configured at ten times the rate spends the
// shared buckets at the other's pace, and the source sees the lower
// budget. When the lower one leaves, the other goes back to its own.
func TestPoolAdmitsAtItsLowestBudget(t *testing.T) {
	r := newBudgetRig(t, 2000)
	const low, high, burstWindow = 50.0, 500.0, 100 * time.Millisecond
	set := func(rate float64) func(*Config) {
		return func(c *Config) { c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = rate, burstWindow, time.Second }
	}
	hi := r.reader(r.serveClient(), set(high))
	lo := r.readerOf(r.serveClient(), set(low), nil, false)
	ctx, stopLo := context.WithCancel(context.Background())
	loDone := make(chan struct{})
	go func() { defer close(loDone); _ = lo.Run(ctx) }()
	t.Cleanup(func() { stopLo(); <-loDone })
	foreground := func(rd *Reader) float64 { return rd.budget.rates.Load().settings.Foreground }
	testenv.Eventually(t, 10*time.Second, "the process configured higher admits at the lower rate", func() error {
		if got := foreground(hi); got != low {
			return fmt.Errorf("admitting foreground at %v/s", got)
		}
		return nil
	})

	before := total(r.reads())
	var wg sync.WaitGroup
	var next atomic.Int64
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 3*time.Second {
				hi.Get(context.Background(), Query{Tenant: "acme", Item: fmt.Sprintf("c%d", 1+next.Add(1)%2000)})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := total(r.reads()) - before
	limit := int64(burstWindow/(time.Second/time.Duration(low))) + 1 + int64(low*elapsed.Seconds()) + 1
	t.Logf("source reads %d in %s through the process configured at %v/s (the pool's lowest %v/s allows %d)", reads, elapsed, high, low, limit)
	if reads > limit || reads == 0 {
		t.Fatalf("source reads %d over %s, want 1 to %d: the pool's lowest budget, %v/s", reads, elapsed, limit, low)
	}

	stopLo()
	<-loDone
	testenv.Eventually(t, 10*time.Second, "the process goes back to its own rate once the lower one left", func() error {
		if got := foreground(hi); got != high {
			return fmt.Errorf("admitting foreground at %v/s", got)
		}
		return nil
	})
}
