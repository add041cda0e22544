package chaos

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// sloHistory is a synthetic run of secs seconds at perSec reads a second:
// each second's reads come from at(s), which says how many of them fail
// (503), how many are misses and how long each takes; the watermark is
// fresh unless stale(s).
type sloSecondPlan struct {
	fail, miss int
	lat        time.Duration
	slow       int // of the reads, this many take slowLat
	slowLat    time.Duration
}

// apiBounds are tidemark_api_request_seconds's buckets.
var apiBounds = []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

func sloHistory(t0 time.Time, secs, perSec int, at func(s int) sloSecondPlan, stale func(s int) bool) sloInput {
	in := sloInput{Foreground: 400, Reads: readSeconds{}, Keys: &keyReads{}, LatBounds: apiBounds, Start: t0, End: t0.Add(time.Duration(secs) * time.Second), Target: ReadSLO, Judged: true}
	for s := 0; s < secs; s++ {
		p := at(s)
		base := t0.Add(time.Duration(s)*time.Second + 100*time.Millisecond)
		for i := 0; i < perSec; i++ {
			a := Answer{Tenant: "acme", Item: fmt.Sprintf("i%d", i%300), Status: http.StatusOK, CacheStatus: "tidemark; hit; detail=l1", Sent: base}
			lat := p.lat
			if i < p.slow {
				lat = p.slowLat
			}
			if i >= perSec-p.fail {
				a.Status, a.CacheStatus = http.StatusServiceUnavailable, "tidemark; fwd=miss; detail=source-unavailable"
			} else if i >= perSec-p.fail-p.miss {
				a.CacheStatus = "tidemark; fwd=miss; stored"
			}
			if i == 0 && s%7 == 0 {
				a.Status = http.StatusNotFound // a missing item: a success
			}
			a.Received = base.Add(lat)
			in.Reads.add(a)
			in.Keys.add(a)
		}
		age := time.Second
		if stale(s) {
			age = 20 * time.Second
		}
		// The serve processes' own count: 1 % of the reads between 50 and
		// 100 ms, the rest within 5 ms.
		apiLat := make([]float64, len(apiBounds)+1)
		apiLat[3], apiLat[7] = float64(perSec-perSec/100), float64(perSec/100)
		in.Source = append(in.Source, SourceSecond{At: t0.Add(time.Duration(s)*time.Second + 500*time.Millisecond), Interval: Duration(time.Second),
			Reads: map[string]float64{ClassForeground: float64(perSec) / 10}})
		in.Samples = append(in.Samples, sample{At: t0.Add(time.Duration(s)*time.Second + 500*time.Millisecond), WMAge: age, WMKnown: true, APILat: apiLat})
	}
	return in
}

// A ten-minute run: a cold start (misses falling to the steady 3 %, 503s
// while the budget is spent, slow answers) for 20 s, then one fault at
// +200 s lifted at +205 s whose recovery lasts until +230 s (watermark
// stale until +222 s, 503s until +226 s, hit ratio low until +230 s).
func steadyWithOneFault(steadyLat time.Duration, steadyFail int) (sloInput, time.Time) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	in := sloHistory(t0, 600, 1000, func(s int) sloSecondPlan {
		switch {
		case s < 20:
			return sloSecondPlan{fail: 200 - 10*s, miss: 800 - 40*s, lat: 30 * time.Millisecond, slow: 100, slowLat: 300 * time.Millisecond}
		case s >= 200 && s < 226:
			return sloSecondPlan{fail: 50, miss: 300, lat: 20 * time.Millisecond, slow: 50, slowLat: time.Second}
		case s >= 226 && s < 230:
			return sloSecondPlan{miss: 200, lat: 5 * time.Millisecond}
		}
		p := sloSecondPlan{miss: 30, lat: steadyLat}
		if s%10 == 5 {
			p.fail = steadyFail
		}
		return p
	}, func(s int) bool { return s >= 200 && s < 222 })
	in.Faults = []FaultRecord{{Kind: FaultRedisRestart, Injected: t0.Add(200 * time.Second), Lifted: t0.Add(205 * time.Second)}}
	return in, t0
}

func TestSLOWindowsOfASteadyRun(t *testing.T) {
	in, t0 := steadyWithOneFault(4*time.Millisecond, 0)
	rep := &Report{}
	rep.judgeSLO(in)
	s := rep.SLO
	if len(s.Misses) != 0 || rep.Violations != 0 {
		t.Fatalf("a run inside the SLO in steady state missed it: %v", s.Misses)
	}
	// The hit ratio settles at 97 %: warm-up ends when a 5 s span reaches
	// 96 % (misses 800-40s: below 4 % from second 20).
	if w := time.Duration(s.WarmUp.Length); w < 17*time.Second || w > 21*time.Second {
		t.Errorf("warm-up lasted %s, want about 19 s (until the hit ratio settles)", w)
	}
	if s.WarmUp.Success > 0.9 || time.Duration(s.WarmUp.P99) < 300*time.Millisecond {
		t.Errorf("warm-up figures %+v: its 503s and slow answers are not in them", s.WarmUp)
	}
	f := in.Faults[0]
	if want := t0.Add(230 * time.Second); !f.Back.Equal(want) {
		t.Errorf("back at %s, want %s (watermark fresh from +222 s, 503s gone from +226 s, hit ratio back from +230 s)", ts(f.Back), ts(want))
	}
	st := s.Recovery[FaultRedisRestart]
	if st.Count != 1 || st.NotRecovered != 0 || time.Duration(st.WindowMax) != 30*time.Second || time.Duration(st.AfterLiftMax) != 25*time.Second {
		t.Errorf("recovery of %s: %+v, want one window of 30 s, 25 s after the lift", FaultRedisRestart, st)
	}
	if st.Figures.Success > 0.97 || time.Duration(st.Figures.P99) < time.Second {
		t.Errorf("the fault window's figures %+v lack its 503s and its 1 s answers", st.Figures)
	}
	if l := time.Duration(s.Steady.Length); l < 540*time.Second || l > 560*time.Second {
		t.Errorf("steady state lasted %s, want the run less warm-up and the fault window (about 550 s)", l)
	}
	if s.Steady.Success != 1 || time.Duration(s.Steady.P99) != 4*time.Millisecond {
		t.Errorf("steady state %+v, want every read successful (404s included) and p99 4 ms", s.Steady)
	}
	// 300 keys read before the fault, 100 foreground reads/s of 400 used
	// in steady state: the budget refills them in 1 s, the recovery took
	// 25 s after the lift.
	if st.BudgetNeeds != Duration(time.Second) || s.SpareBudget != 300 || !st.Slower {
		t.Errorf("spare budget %.0f/s, %s needs %s of the budget (slower: %v); want 300/s, 1s, slower", s.SpareBudget, FaultRedisRestart, time.Duration(st.BudgetNeeds), st.Slower)
	}
	in.Foreground = 110 // 10/s spare: 30 s to refill 300 keys
	if st := judgeSLO(in).Recovery[FaultRedisRestart]; st.BudgetNeeds != Duration(30*time.Second) || st.Slower {
		t.Errorf("with 10 reads/s spare: %+v, want 30 s needed and a recovery not slower than that", st)
	}
	if s.Steady.APIWithin != 0.99 || time.Duration(s.Steady.APIP99) != 5*time.Millisecond {
		t.Errorf("the API's own count in steady state: %.4f within 50 ms, p99 %s; want 0.99 and 5ms", s.Steady.APIWithin, time.Duration(s.Steady.APIP99))
	}
}

func TestSLOMissedInSteadyStateIsAViolation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lat       time.Duration
		fail      int
		want      string
		judgedNot bool
	}{
		{"p99 just above 50 ms", 50*time.Millisecond + time.Microsecond, 0, "p99 50.25ms above 50ms", false},
		{"p99 at 50 ms", 50 * time.Millisecond, 0, "", false},
		// 2 503s every 10 s at 1,000 reads/s: 99.98 %.
		{"success 99.98 %", 4 * time.Millisecond, 2, "success 99.9800% below 99.99%", false},
		// 1 every 10 s: 99.99 %, at the target.
		{"success 99.99 %", 4 * time.Millisecond, 1, "", false},
		{"a dense run reports but does not judge", 80 * time.Millisecond, 5, "p99", true},
	} {
		in, _ := steadyWithOneFault(tc.lat, tc.fail)
		in.Judged = !tc.judgedNot
		rep := &Report{}
		rep.judgeSLO(in)
		got := strings.Join(rep.SLO.Misses, "; ")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: missed: %s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: misses %q, want %q", tc.name, got, tc.want)
		case tc.judgedNot && (rep.Violations != 0 || !rep.Pass()):
			t.Errorf("%s: %d violations", tc.name, rep.Violations)
		case !tc.judgedNot && tc.want != "" && (rep.ByKind[KindSLO] == 0 || rep.Pass()):
			t.Errorf("%s: the miss is no %s violation (%v)", tc.name, KindSLO, rep.ByKind)
		}
	}
}

// Faults closer than their recoveries leave no steady state: a sparse run
// that cannot judge the SLO says so, as a violation.
func TestSLONoSteadyStateIsAMiss(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	in := sloHistory(t0, 120, 200, func(s int) sloSecondPlan { return sloSecondPlan{lat: time.Millisecond} },
		func(s int) bool { return true }) // the watermark never fresh: never back
	in.Faults = []FaultRecord{{Kind: FaultKillApply, Injected: t0.Add(10 * time.Second), Lifted: t0.Add(12 * time.Second)}}
	rep := &Report{}
	rep.judgeSLO(in)
	if rep.ByKind[KindSLO] != 1 || !strings.Contains(rep.SLO.Misses[0], "steady state lasted") {
		t.Fatalf("misses %v, want the steady state too short to judge", rep.SLO.Misses)
	}
	if st := rep.SLO.Recovery[FaultKillApply]; st.NotRecovered != 1 {
		t.Errorf("a fault whose watermark never came back: %+v", st)
	}
}

func TestSLOLatencyBuckets(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, 250 * time.Microsecond, 49999 * time.Microsecond, 50 * time.Millisecond,
		50*time.Millisecond + 1, 100 * time.Millisecond, 1234 * time.Millisecond, 9 * time.Second, time.Minute} {
		i := latBucket(d)
		if d > latBound(i) || (i > 0 && d <= latBound(i-1)) {
			t.Errorf("%s in bucket %d (%s, %s]", d, i, latBound(i-1), latBound(i))
		}
	}
}

func TestSLOReportText(t *testing.T) {
	in, _ := steadyWithOneFault(80*time.Millisecond, 0)
	rep := &Report{Bound: Duration(30 * time.Second)}
	rep.Faults = in.Faults
	rep.judgeSLO(in)
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAIL", "0 violations of the 30s freshness promise, 0 of the source budget, 1 of the read SLO", "read-slo 1",
		"MISSED: steady-state p99 80ms above 50ms", "steady state", "warm-up", "redis-restart", "window max 30s", "after lift max 25s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSparseSchedule(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Schedule, cfg.FaultEvery, cfg.Duration = ScheduleSparse, 2*time.Minute, 30*time.Minute
	kinds := cfg.Kinds()
	s := cfg.plan()
	if len(s) != 14 {
		t.Fatalf("%d faults in 30 min at one per 2 min, want 14 (the first 2 min in, none in the last 2 min)", len(s))
	}
	for i, f := range s {
		lo := time.Duration(i+1) * cfg.FaultEvery
		if f.At < lo || f.At > lo+cfg.FaultEvery/10 {
			t.Errorf("fault %d (%s) at %s, want within [%s, %s]", i, f.Kind, f.At, lo, lo+cfg.FaultEvery/10)
		}
		if !slices.Contains(kinds, f.Kind) || slices.ContainsFunc(s[:i], func(g plannedFault) bool { return g.Kind == f.Kind }) {
			t.Errorf("fault %d: %s is not a new applicable kind", i, f.Kind)
		}
	}
	if !slices.Equal(s, cfg.plan()) {
		t.Error("the same seed gave another schedule")
	}
	cfg.Faults = []string{FaultKillServe, FaultRedisHung}
	if s := cfg.plan(); len(s) != 14 || s[0].Kind == s[1].Kind || s[0].Kind != s[2].Kind {
		t.Errorf("two kinds over 14 faults: %v, want them alternating", s)
	}
	cfg.FaultEvery = 20 * time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a sparse schedule every 20 s: %v, want a refusal", err)
	}
	cfg.Schedule = "lumpy"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Schedule") {
		t.Errorf("schedule %q: %v, want a refusal", cfg.Schedule, err)
	}
}
