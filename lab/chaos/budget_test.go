package chaos

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The budget's verdict: a planted second above the total (and one above a
// class's own limit) is a violation listed with the second, the classes'
// shares and the faults around it; a burst within the tolerance is not.
func TestBudgetPlantedViolations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := BudgetLimits{Total: 600, Burst: Duration(100 * time.Millisecond),
		Classes: map[string]float64{ClassForeground: 400, ClassBackground: 200, ClassReadYourWrites: 100}}
	sec := func(s int, reads map[string]float64) SourceSecond {
		return SourceSecond{At: t0.Add(time.Duration(s) * time.Second), Interval: Duration(time.Second), Reads: reads}
	}
	secs := []SourceSecond{
		sec(1, map[string]float64{ClassForeground: 400, ClassBackground: 150, ClassAudit: 50}),                            // at the budget
		sec(2, map[string]float64{ClassForeground: 480, ClassBackground: 120, ClassAudit: 20}),                            // within the bursts: 400+80+1, 600+120+1
		sec(3, map[string]float64{ClassForeground: 400, ClassBackground: 203, ClassReadYourWrites: 120, ClassUnknown: 1}), // total 724 > 721
		sec(4, map[string]float64{ClassForeground: 200, ClassBackground: 150, ClassAudit: 100}),                           // background + audit 250 > 241
	}
	faults := []FaultRecord{
		{Kind: FaultKillMaster, Target: "redis1", Injected: t0.Add(1500 * time.Millisecond), Lifted: t0.Add(2 * time.Second), Recovered: t0.Add(2500 * time.Millisecond)},
		{Kind: FaultColdBurst, Target: "api", Injected: t0.Add(-30 * time.Second), Lifted: t0.Add(-25 * time.Second), Recovered: t0.Add(-24 * time.Second)},
	}
	vs := JudgeBudget(l, secs, faults, t0, t0.Add(time.Minute))
	if len(vs) != 2 {
		t.Fatalf("%d budget violations, want 2 (second 3 over the total, second 4 over background): %+v", len(vs), vs)
	}
	if v := vs[0]; v.Class != TotalClass || v.Reads != 724 || v.Offset != Duration(3*time.Second) || v.Shares[ClassReadYourWrites] != 120 ||
		len(v.Faults) != 1 || !strings.HasPrefix(v.Faults[0], FaultKillMaster) {
		t.Errorf("second 3: %+v, want total 724 reads with its shares and the master kill around it", v)
	}
	if v := vs[1]; v.Class != ClassBackground || v.Reads != 250 {
		t.Errorf("second 4: %+v, want background (with the auditor) 250 reads", v)
	}

	rep := &Report{Bound: Duration(30 * time.Second), ByKind: map[Kind]int64{}}
	rep.judgeBudget(l, secs, faults, t0, t0.Add(time.Minute))
	if rep.Pass() || rep.Violations != 2 || rep.ByKind[KindBudget] != 2 || rep.SourceReadsPeak != 724 {
		t.Fatalf("report: pass %v, violations %d, budget %d, peak %v", rep.Pass(), rep.Violations, rep.ByKind[KindBudget], rep.SourceReadsPeak)
	}
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAIL", "2 of the source budget", "budget 2", "source reads peak 724/s against a budget of 600/s at +3s",
		"budget: total 724 reads", "read_your_writes 120", "fault    cluster-kill-master redis1"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		ByKind map[string]int64 `json:"violations_by_kind"`
		Budget []struct {
			Class  string   `json:"class"`
			Offset string   `json:"offset"`
			Faults []string `json:"faults_around"`
		} `json:"budget_violations"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.ByKind["budget"] != 2 || len(back.Budget) != 2 || back.Budget[0].Class != TotalClass || back.Budget[0].Offset != "3s" || len(back.Budget[0].Faults) != 1 {
		t.Errorf("json report: by kind %v, budget violations %+v", back.ByKind, back.Budget)
	}
}

// The reads that waited on a lock the harness held on the catalog complete
// together when it is released (the source counts a statement when it
// ends): the sample covering the release, or the source timeout after it,
// may hold the class's rate × that timeout and one auditor batch more; any
// other sample may not, and neither may that one beyond it. The figures are
// ci63's: 160 background reads and 88 auditor rows in 1.006 s against 242.
func TestBudgetAllowsTheReadsThatWaitedOnAHarnessLock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := BudgetLimits{Total: 600, Burst: Duration(100 * time.Millisecond), LockWait: Duration(time.Second), AtOnce: 50,
		Classes: map[string]float64{ClassForeground: 400, ClassBackground: 200}}
	iv := 1006 * time.Millisecond
	sec := func(end time.Duration, background, audit float64) SourceSecond {
		return SourceSecond{At: t0.Add(end), Interval: Duration(iv), Reads: map[string]float64{ClassBackground: background, ClassAudit: audit}}
	}
	unlocked := t0.Add(90*time.Second + 100*time.Millisecond)
	faults := []FaultRecord{{Kind: FaultLongOutage, Injected: t0.Add(60 * time.Second), Unlocked: unlocked, Lifted: unlocked.Add(time.Millisecond)}}
	atRelease := sec(91*time.Second, 160, 88)
	cases := []struct {
		name   string
		secs   []SourceSecond
		faults []FaultRecord
		want   int
	}{
		{"the release's sample", []SourceSecond{atRelease}, faults, 0},
		{"the sample after it, within the source timeout", []SourceSecond{sec(92*time.Second, 160, 88)}, faults, 0},
		{"no lock released", []SourceSecond{atRelease}, []FaultRecord{{Kind: FaultLongOutage, Injected: t0.Add(60 * time.Second), Lifted: unlocked}}, 1},
		{"two seconds after the source timeout", []SourceSecond{sec(94*time.Second, 160, 88)}, faults, 1},
		// 200 × 1.006 + 2 × 200 × 0.1 + 1 + 200 × 1 + 50 = 492.2
		{"beyond what can have waited", []SourceSecond{sec(91*time.Second, 400, 93)}, faults, 1},
		{"at what can have waited", []SourceSecond{sec(91*time.Second, 400, 92)}, faults, 0},
	}
	for _, c := range cases {
		if vs := JudgeBudget(l, c.secs, c.faults, t0, t0.Add(2*time.Minute)); len(vs) != c.want {
			t.Errorf("%s: %d violations, want %d: %+v", c.name, len(vs), c.want, vs)
		}
	}
}
