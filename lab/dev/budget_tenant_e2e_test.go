package dev

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/testenv"
)

// TestTenantShareOfTheTotalOnRealServeProcesses runs the last point of
// issue 36's item 5 on a real `tidemark serve`, the source's reads counted
// by Postgres (pg_stat_statements): fairness across tenants where the
// total is spent, across classes. 40 foreground + 10 background reads/s (a
// total of 50/s), the read-your-writes ceiling at its highest (40/s, the
// foreground rate), the auditor at 1,000 entries/s so the background class
// is busy, a burst of 500 ms (on a loaded box globex's reads arrive in
// clumps, which a 100 ms burst of its class share would refuse, flood or
// not). Tenant acme floods cold reads and ?min_version= reads of items no
// one has (its foreground share, 20/s, and the read-your-writes class are
// more than the total together); globex sends ordinary cold reads at 10/s,
// below its share of the total. globex is answered: acme, reading faster
// than its share of the total, may spend only its share of the total's
// burst. Before the fix acme's two floods took the total and globex got
// 503s.
//
// With ReproCommitEnv set to a commit before the fix the test must fail.
func TestTenantShareOfTheTotalOnRealServeProcesses(t *testing.T) {
	t.Parallel()
	const fg, bg, ryw = 40.0, 10.0, 40.0
	bin := budgetBinary(t)
	e := newE2E(t, func(e *e2e) {
		e.serve.bin = bin
		e.serve.args = append(e.serve.args, "--source-foreground-rate", fmt.Sprint(fg), "--source-background-rate", fmt.Sprint(bg),
			"--source-ryw-rate", fmt.Sprint(ryw), "--audit-rate", "1000", "--source-burst", "500ms")
	})
	ctx := testenv.Context(t, 5*time.Minute)
	src := sampleForeground(ctx, t, e)
	acme, globex := e.keys[0], e.keys[1]

	// Entries of rows that exist for the auditor to compare (it counts in
	// pg_stat_statements by the rows it reads; an absent id's has none).
	cacheItems(t, e, globex, 300)
	testenv.Eventually(t, 60*time.Second, "the auditor reading the source (background busy)", func() error {
		now := time.Now()
		if _, perSec, span := src.classRate(now.Add(-4*time.Second), now, chaos.ClassBackground); span < 2*time.Second || perSec < bg/4 {
			return fmt.Errorf("background and auditor reads %.1f/s over %s", perSec, span)
		}
		return nil
	})
	stop := make(chan struct{})
	cold := coldGets(e.apiBase, acme, 8, false, stop)
	mv := coldGets(e.apiBase, acme, 8, true, stop)
	time.Sleep(2 * time.Second) // the floods are on
	from := time.Now()
	var answered, refused atomic.Int64
	const asks = 150 // 10/s for 15 s: a fifth of the total, below globex's share (half of it)
	tick := time.NewTicker(100 * time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	why := map[string]int{} // globex's refusals by status and detail
	for i := range asks {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, detail := getDetail(fmt.Sprintf("%s/v1/catalog/items/cold-%d-%x", e.apiBase, i, rand.Uint32()), globex.key)
			switch code {
			case http.StatusOK, http.StatusNotFound:
				answered.Add(1)
			default:
				refused.Add(1)
				mu.Lock()
				why[fmt.Sprintf("%d %s", code, detail)]++
				mu.Unlock()
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	to := time.Now()
	close(stop)
	cc, mc := cold(), mv()
	time.Sleep(1500 * time.Millisecond) // the last sample
	_, fgRate, span := src.classRate(from, to, chaos.ClassForeground)
	_, rywRate, _ := src.classRate(from, to, chaos.ClassReadYourWrites)
	_, bgRate, _ := src.classRate(from, to, chaos.ClassBackground)
	total := fgRate + rywRate + bgRate
	t.Logf("over %s the source read %.1f foreground, %.1f read-your-writes and %.1f background/auditor reads/s: %.1f/s against a total of %g/s; acme's answers by status: cold %v, min_version %v; globex's %d cold reads at 10/s: %d answered, %d refused %v",
		span.Round(time.Millisecond), fgRate, rywRate, bgRate, total, fg+bg, cc, mc, asks, answered.Load(), refused.Load(), why)
	if span < 10*time.Second {
		t.Fatalf("the source was sampled over %s of the 15 s", span)
	}
	// The total binds (the auditor asks all along: it was reading before
	// the floods began): else globex's answers show nothing.
	if total < (fg+bg)*0.8 || rywRate < 5 {
		t.Fatalf("the floods and the auditor read %.1f/s (read-your-writes %.1f/s) against a total of %g/s: the total did not bind, so this shows nothing", total, rywRate, fg+bg)
	}
	if total > (fg+bg)*1.1 {
		t.Errorf("the source served %.1f reads/s against a total of %g/s", total, fg+bg)
	}
	if answered.Load() < asks*95/100 {
		t.Errorf("acme flooding cold and min_version reads with the background busy left globex %d of %d ordinary cold reads at 10/s answered (total %g/s, globex's share %g/s): acme took more than its share of the total", answered.Load(), asks, fg+bg, (fg+bg)/2)
	}
}

// cacheItems reads tenant k's first n demo items until each is answered
// (the budget refuses some: they are asked again), so they are cached.
func cacheItems(t *testing.T, e *e2e, k apiKey, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	var late atomic.Bool
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				for getCode(fmt.Sprintf("%s/v1/catalog/items/item-%05d", e.apiBase, i), k.key) != http.StatusOK {
					if time.Now().After(deadline) {
						late.Store(true)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if late.Load() {
		t.Fatalf("%d items of %s not all answered within 2 minutes", n, k.tenant)
	}
}

// getDetail is getCode with the problem's detail of an answer that is not
// 200 or 404.
func getDetail(u, key string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }() // read below; nothing to report
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
		return resp.StatusCode, ""
	}
	var p struct {
		Detail string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p) // a body that is no problem leaves the detail empty
	return resp.StatusCode, p.Detail
}
