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
	for _, want := range []string{"p99 < 10ms up to **7500 req/s** (p99 9.00 ms); /healthz met the goal at every rate offered, so serve reaches **at most 1.00x** of it",
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

// The open-loop ratio is a measurement only when both sides have a step
// above their best that missed the goal; otherwise the report bounds it and
// says which way.
func TestReportSaysWhetherTheOpenLoopRatioIsBracketed(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	rows := func(serveTop, ceilTop time.Duration) []Row {
		return []Row{
			{Step: "saturation", Rate: 20000, P99: ms(8)},
			{Step: "open 50%", Target: 10000, Rate: 10000, P99: ms(5)},
			{Step: "open 85%", Target: 17000, Rate: 17000, P99: serveTop},
			{Step: "ceiling /healthz", Rate: 30000, P99: ms(6)},
			{Step: "ceiling /healthz open 50%", Target: -10000, Rate: 10000, P99: ms(3)},
			{Step: "ceiling /healthz open 85%", Target: -17000, Rate: 17000, P99: ms(4)},
			{Step: "ceiling /healthz open 94%", Target: -18700, Rate: 18700, P99: ms(5)},
			{Step: "ceiling /healthz open 103%", Target: -20570, Rate: 20570, P99: ceilTop},
		}
	}
	for _, tc := range []struct {
		serveTop, ceilTop time.Duration
		want              string
	}{
		{ms(12), ms(15), "serve reaches **0.53x** of it, and the ratio of the two limits lies between 0.49x and 0.91x (each side's next step up, 17000 and 20570 req/s, missed the goal)"},
		{ms(12), ms(9), "so serve reaches **at most 0.83x** of it"},
		{ms(9), ms(15), "so it reaches **at least 0.83x** of it"},
		{ms(9), ms(9), "so the ratio is not established (0.83x at the rates offered)"},
	} {
		r := Result{P99Goal: 10 * time.Millisecond, Rows: rows(tc.serveTop, tc.ceilTop)}
		r.pickBest()
		var b strings.Builder
		if err := r.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("serve's top step p99 %s, the ceiling's %s: report lacks %q:\n%s", tc.serveTop, tc.ceilTop, tc.want, b.String())
		}
	}
}

// Climbing offers 10 % more per step while the last step met the goal, and
// stops at the first that missed it, or after maxClimbSteps.
func TestClimbStopsAtTheFirstStepThatMisses(t *testing.T) {
	r := Result{P99Goal: 10 * time.Millisecond}
	run := func(limit float64) []float64 {
		var offered []float64
		err := climb(1.1, Row{Target: 1000, P99: time.Millisecond}, 1000, r.meets, func(rate float64) (Row, error) {
			offered = append(offered, rate)
			p99 := time.Millisecond
			if rate > limit {
				p99 = 20 * time.Millisecond
			}
			return Row{Target: rate, P99: p99}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return offered
	}
	if got := run(1250); len(got) != 3 || int(got[2]) != 1331 {
		t.Errorf("limit 1250: offered %v, want 1100, 1210, 1331 (the first over the limit ends it)", got)
	}
	if got := run(1e9); len(got) != maxClimbSteps {
		t.Errorf("no limit: offered %d steps, want maxClimbSteps (%d)", len(got), maxClimbSteps)
	}
	if got := climb(1.1, Row{Target: 1000, P99: time.Second}, 1000, r.meets, nil); got != nil {
		t.Errorf("a last step that missed the goal: climb = %v, want no step at all", got)
	}
}
