package api

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/reader"
)

// One tenant floods min_version reads of random ids as fast as it can; a
// second tenant's cold visitor reads and its own read-your-writes reads are
// still answered (at least 99 %): min_version reads have their own class,
// and inside a class each active tenant gets its share.
func TestMinVersionFloodCannotStarveOtherTenant(t *testing.T) {
	e := newEnv(t)
	const fgRate, rywRate = 200.0, 100.0
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.ForegroundRate, c.ReadYourWritesRate, c.BudgetBurst = fgRate, rywRate, 100*time.Millisecond
		// Generous deadlines: a loaded -race box must not turn slowness into
		// 503s; the property here is the budget.
		c.RequestTimeout, c.SourceTimeout, c.LookupTimeout, c.InFlightWait, c.L1Size = 10*time.Second, 5*time.Second, 5*time.Second, 5*time.Second, 0
	}})
	flood, calmKey := e.apiKey("flood"), e.apiKey("calm")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'calm', 'c' || g, 1, '{}' FROM generate_series(1, 2000) g`)
	e.do("GET", in.item("warm"), flood, "")
	e.do("GET", in.item("warm"), calmKey, "")

	// The flood runs until the other tenant has sent all its reads.
	var calmDone atomic.Bool
	start := time.Now()
	var floodSent, floodAdmitted, floodRefused atomic.Int64
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !calmDone.Load() {
				r := e.do("GET", in.item(fmt.Sprintf("f%d", rand.Int64()))+"?min_version=1", flood, "")
				floodSent.Add(1)
				switch r.code {
				case 404:
					floodAdmitted.Add(1)
				case 503:
					floodRefused.Add(1)
				default:
					t.Errorf("flood: %d %s", r.code, r.raw)
				}
			}
		}()
	}
	// The calm tenant: up to 25 cold visitor reads/s and 25 min_version
	// reads/s, 100 of each, each of a different item.
	var mu sync.Mutex
	ok, total := map[string]int{}, map[string]int{}
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
				url := in.item(fmt.Sprintf("c%d", next.Add(1)))
				if kind == "read_your_writes" {
					url += "?min_version=1"
				}
				r := e.do("GET", url, calmKey, "")
				mu.Lock()
				total[kind]++
				if r.code == 200 {
					ok[kind]++
				} else {
					t.Logf("calm %s: %d %s", kind, r.code, r.header.Get("Cache-Status"))
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
	t.Logf("flooding tenant: %d min_version requests (%.0f/s), %d source reads admitted (%.0f/s; class rate %.0f/s), %d refused",
		floodSent.Load(), float64(floodSent.Load())/secs, floodAdmitted.Load(), float64(floodAdmitted.Load())/secs, rywRate, floodRefused.Load())
	for _, kind := range []string{"visitor", "read_your_writes"} {
		ratio := float64(ok[kind]) / float64(total[kind])
		t.Logf("other tenant %s reads: %d/%d answered (%.2f %%)", kind, ok[kind], total[kind], 100*ratio)
		if ratio < 0.99 {
			t.Errorf("other tenant %s reads: %d/%d answered, want at least 99 %%", kind, ok[kind], total[kind])
		}
	}
	if floodRefused.Load() == 0 {
		t.Fatal("the flood was never refused: it did not reach the budget")
	}
}

// With Redis down, N serve processes together stay within the class rate
// (each allows rate / live processes, counted while Redis was up), counted
// by Postgres itself.
func TestFallbackBudgetSharedAcrossProcesses(t *testing.T) {
	e := newEnv(t)
	const rate, n = 10.0, 3
	const burst = 100 * time.Millisecond
	var ins []*instance
	for range n {
		ins = append(ins, e.instance(instOpts{cfg: func(c *Config) {
			c.ForegroundRate, c.BudgetBurst, c.LookupTimeout = rate, burst, 250*time.Millisecond
		}}))
	}
	for _, in := range ins { // every process has seen all n
		err := in.srv.rd.Join(context.Background())
		if got, _ := in.srv.rd.Share(time.Now()); err != nil || got != n {
			t.Fatalf("live serve processes: %d (%v), want %d", got, err, n)
		}
	}
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'r' || g, 1, '{}' FROM generate_series(1, 3000) g`)
	for _, in := range ins {
		e.do("GET", in.item("warm"), key, "")
	}
	for _, in := range ins {
		waitFor(t, 30*time.Second, "the process knows its share", func() bool { _, ok := in.srv.rd.Share(time.Now()); return ok })
	}
	e.redis.Kill()
	before := e.sourceReads()
	start := time.Now()
	// Each process admits locally from presenceLate (3 s) after its last
	// beat attempt until presenceTTL (8 s) after its last beat (reader,
	// presence.go): the flood spans that window.
	const dur = 8 * time.Second
	var next atomic.Int64
	var wg sync.WaitGroup
	var served atomic.Int64
	for i := range 20 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < dur {
				r := e.do("GET", ins[i%n].item(fmt.Sprintf("r%d", next.Add(1))), key, "")
				if r.code == 200 {
					served.Add(1)
				} else if r.code != 503 {
					t.Errorf("GET: %d %s", r.code, r.raw)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := e.sourceReads() - before
	limit := int64(rate*elapsed.Seconds()+rate*burst.Seconds()) + n
	t.Logf("%d processes, Redis down: %d source reads in %s (class rate %.0f/s: limit %d), %d served", n, reads, elapsed, rate, limit, served.Load())
	if reads > limit {
		t.Fatalf("%d source reads with Redis down across %d processes, limit %d (the class rate in total)", reads, n, limit)
	}
	if served.Load() == 0 {
		t.Fatal("nothing served from the source with Redis down")
	}
}

// A tenant alone spends the read-your-writes class to its end; a second
// tenant then arrives asking within its share: its first read and every one
// after it are admitted, while the first tenant keeps asking as fast as it is
// let. (A lone tenant's bucket follows the class and leaves it one read;
// what it owes is rescaled to its share when the second tenant arrives.)
func TestNewTenantGetsItsShareOfClassSpentByLoneTenant(t *testing.T) {
	e := newEnv(t)
	const rate = 10.0 // one read per 100 ms: wide margins on a loaded box
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.ReadYourWritesRate, c.BudgetBurst, c.LookupTimeout = rate, time.Second, 5*time.Second
	}})
	b := in.srv.rd
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lone tenant: 12 admissions (more than the class's burst of 10,
	// which starts empty), so the class is spent to its end.
	for i := range 12 {
		release, err := b.AcquireWait(ctx, reader.ClassReadYourWrites, "flood", 1)
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
			if release, err := b.AcquireWait(ctx, reader.ClassReadYourWrites, "flood", 1); err == nil {
				release()
			}
		}
	}()
	// The newcomer: 8 reads, the second 150 ms after the first (the class has
	// freed one read by then, which the first tenant, at its new share, must
	// leave), then one per 250 ms (under its share of 5/s).
	refused := 0
	for i := range 8 {
		release, err := b.Acquire(ctx, reader.ClassReadYourWrites, "calm")
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
