package servebench

import (
	"strings"
	"testing"
	"time"
)

// The p99 goal is judged twice at the same offered rates: serve's GETs and
// the /healthz ceiling, so a box that cannot hold the goal for any handler
// says so instead of charging it to serve.
func TestReportJudgesTheCeilingAtTheSameRates(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	r := Result{P99Goal: 10 * time.Millisecond, Rows: []Row{
		{Step: "saturation", Rate: 15000, P99: ms(9)},
		{Step: "open 25%", Target: 3750, Rate: 3750, P99: ms(8)},
		{Step: "open 50%", Target: 7500, Rate: 7500, P99: ms(60)},
		{Step: "ceiling /healthz", Rate: 22000, P99: ms(8)},
		{Step: "ceiling /healthz open 25%", Target: -3750, Rate: 3750, P99: ms(7)},
		{Step: "ceiling /healthz open 50%", Target: -7500, Rate: 7500, P99: ms(9)},
	}}
	r.pickBest()
	if r.Best == nil || r.Best.Step != "open 25%" {
		t.Fatalf("Best = %+v, want the open 25%% GET step (the 50%% one missed the goal, the ceiling's rows are not serve's)", r.Best)
	}
	if r.CeilingBest == nil || r.CeilingBest.Step != "ceiling /healthz open 50%" {
		t.Fatalf("CeilingBest = %+v, want the ceiling's open 50%% step", r.CeilingBest)
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"p99 < 10ms up to **7500 req/s** (p99 9.00 ms); serve reaches 0.50x of it",
		"Closed loop: serve 15000 req/s against its own /healthz's 22000 req/s: **0.68x**."} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, b.String())
		}
	}
	r.Rows[4].P99, r.Rows[5].P99 = ms(11), ms(12)
	r.pickBest()
	b.Reset()
	_ = r.WriteTable(&b)
	if want := "no step met p99 < 10ms either"; r.CeilingBest != nil || !strings.Contains(b.String(), want) {
		t.Fatalf("with the ceiling over the goal at every rate: CeilingBest %+v, report lacks %q:\n%s", r.CeilingBest, want, b.String())
	}
}
