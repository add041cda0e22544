package api

import (
	"context"
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"tidemark/lab/testenv"
)

// AcquireBackground waits while the background class is spent: n reads at
// the class rate take at least (n-1)/rate less the burst, every refusal on
// the way is counted, and an ending context ends the wait with its error.
func TestAcquireBackgroundWaitsForTheBudget(t *testing.T) {
	e := newEnv(t)
	const rate, burst, n = 20.0, 50 * time.Millisecond, 20
	in := e.instance(instOpts{cfg: func(c *Config) { c.BackgroundRate, c.BudgetBurst = rate, burst }})
	refusals := func() float64 {
		var m dto.Metric
		if err := in.srv.m.budgetRejections.WithLabelValues(classBackground).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := refusals()
	start := time.Now()
	if err := in.srv.AcquireBackground(testenv.Context(t, 30*time.Second), n); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	least := time.Duration(float64(n-1)/rate*float64(time.Second)) - 2*burst
	t.Logf("%d background reads at %v/s took %s (at least %s), %v refusals", n, rate, took, least, refusals()-before)
	if took < least {
		t.Errorf("%d reads admitted in %s, want at least %s: the wait returned before the budget admitted them", n, took, least)
	}
	if refusals() == before {
		t.Error("no refusal counted in tidemark_api_budget_rejections_total{class=background}")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	err := in.srv.AcquireBackground(ctx, 1000)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireBackground past its context's end: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the wait outlived its context by %s", took-300*time.Millisecond)
	}
}
