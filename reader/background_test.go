package reader

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// AcquireBackground waits while the background class is spent: n reads at
// the class rate take at least (n-1)/rate less the burst, every refusal on
// the way is counted, and an ending context ends the wait with its error.
func TestAcquireBackgroundWaitsForTheBudget(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	const rate, burst, n = 20.0, 50 * time.Millisecond, 20
	rd := newTestReaderOf(t, rdb, newMemSource(), func(c *Config) { c.BackgroundRate, c.BudgetBurst = rate, burst }, nil)
	refusals := func() float64 { return counterValue(t, rd.m.budgetRejections.WithLabelValues(ClassBackground)) }
	before := refusals()
	start := time.Now()
	if err := rd.AcquireBackground(testenv.Context(t, 30*time.Second), n); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	least := time.Duration(float64(n-1)/rate*float64(time.Second)) - 2*burst
	t.Logf("%d background reads at %v/s took %s (at least %s), %v refusals", n, rate, took, least, refusals()-before)
	if took < least {
		t.Errorf("%d reads admitted in %s, want at least %s: the wait returned before the budget admitted them", n, took, least)
	}
	if refusals() == before {
		t.Error("no refusal counted in tidemark_reader_budget_rejections_total{class=background}")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	err := rd.AcquireBackground(ctx, 1000)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireBackground past its context's end: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the wait outlived its context by %s", took-300*time.Millisecond)
	}
}

// A warm read the background budget refuses gives the key's fill lease
// back: the warmer's retry takes a fresh lease and fills the key once the
// budget admits it, instead of finding its own lease held (WarmBusy) and
// leaving the key cold.
func TestWarmRefusedGivesTheLeaseBack(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "a", 1, `{"n":1}`)
	src.set("acme", "b", 1, `{"n":2}`)
	// One background read every 5 s: once one is admitted, the next is refused.
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.BackgroundRate = 0.2 }, nil)
	ctx := testenv.Context(t, 60*time.Second)
	// A fresh budget starts empty, and background reads leave half of the
	// total's burst to the request path: the first read waits for that.
	testenv.Eventually(t, 20*time.Second, "the first warm read is admitted", func() error {
		out, err := rd.Warm(ctx, "acme", "a")
		switch {
		case errors.Is(err, ErrBudget):
			return err
		case err != nil || out.Result != WarmFilled:
			t.Fatalf("first warm read: %+v %v, want filled", out, err)
		}
		return nil
	})
	if out, err := rd.Warm(ctx, "acme", "b"); !errors.Is(err, ErrBudget) {
		t.Fatalf("second warm read within the budget's interval: %+v %v, want a refusal", out, err)
	}
	// Retried at once: the lease of the refused read must be free again.
	if out, err := rd.Warm(ctx, "acme", "b"); out.Result == WarmBusy || (err != nil && !errors.Is(err, ErrBudget)) {
		t.Fatalf("retry after a refusal: %+v %v, want a refusal or filled (busy: the refused read kept the key's lease)", out, err)
	}
	testenv.Eventually(t, 20*time.Second, "the refused key is filled once the budget admits it", func() error {
		out, err := rd.Warm(ctx, "acme", "b")
		switch {
		case errors.Is(err, ErrBudget):
			return err
		case err != nil:
			t.Fatalf("warm read: %v", err)
		case out.Result != WarmFilled && out.Result != WarmCached:
			t.Fatalf("warm read: %+v, want filled", out)
		}
		return nil
	})
}

// AcquireBackground(n) is one admission of cost n, not n admissions of one:
// the auditor's batch of 100 entries costs the budget's Redis a couple of
// script calls, not one per entry (which was up to 200 scripts/s on the
// Redis that answers lookups).
func TestAcquireBackgroundIsOneAdmissionOfCostN(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	rd := newTestReaderOf(t, rdb, newMemSource(), func(c *Config) { c.BackgroundRate, c.BudgetBurst = 5000, 100*time.Millisecond }, nil)
	ctx := testenv.Context(t, 30*time.Second)
	scripts := func() int64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
					n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
					if err != nil {
						t.Fatalf("INFO commandstats %q: %v", line, err)
					}
					total += n
				}
			}
		}
		return total
	}
	const n = 100
	before := scripts()
	start := time.Now()
	if err := rd.AcquireBackground(ctx, n); err != nil {
		t.Fatal(err)
	}
	// + the other loops' scripts meanwhile: 5, and the presence beats' 3
	// a second (budget set, serve set, namespace stamp) on a slow box.
	most := (n+rd.MaxCost(ClassBackground)-1)/rd.MaxCost(ClassBackground) + 5 + 3*int(time.Since(start).Seconds()+1)
	if got := scripts() - before; got > int64(most) {
		t.Errorf("AcquireBackground(%d) ran %d scripts on the budget's Redis, want at most %d (one admission per %d reads)",
			n, got, most, rd.MaxCost(ClassBackground))
	}
}
