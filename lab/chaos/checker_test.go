package chaos

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// plantedSource is one item's history: v1 at t0, v2 at t0+10s, v3 at t0+50s,
// v4 (a deletion) at t0+100s; and an item created at t0+40s.
func plantedSource(t0 time.Time) *Source {
	s := NewSource()
	for _, c := range []Commit{
		{Tenant: "acme", Item: "i1", Version: 1, At: t0},
		{Tenant: "acme", Item: "i1", Version: 3, At: t0.Add(50 * time.Second)},
		{Tenant: "acme", Item: "i1", Version: 2, At: t0.Add(10 * time.Second)},
		{Tenant: "acme", Item: "i1", Version: 4, Deleted: true, At: t0.Add(100 * time.Second)},
		{Tenant: "acme", Item: "new", Version: 1, At: t0.Add(40 * time.Second)},
	} {
		s.Add(c)
	}
	s.Add(Commit{Tenant: "acme", Item: "i1", Version: 2, At: t0.Add(10 * time.Second)}) // re-read: ignored
	return s
}

func ok(tenant, item string, v int64, sent time.Time) Answer {
	return Answer{Tenant: tenant, Item: item, Status: http.StatusOK, Version: v, Sent: sent, Received: sent.Add(5 * time.Millisecond),
		PayloadTenant: tenant, PayloadItem: item, PayloadVersion: v}
}

func TestCheckerPlantedViolations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	src := plantedSource(t0)
	if src.Len() != 5 {
		t.Fatalf("Len = %d, want 5 (duplicate re-read ignored)", src.Len())
	}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	with := func(a Answer, f func(*Answer)) Answer { f(&a); return a }
	c := Checker{Bound: 30 * time.Second}
	// The fault unbumped-write rewrote new/v1's payload at t0+45s, keeping
	// the version, with marker 7.
	src.AddUnbumped(Unbumped{Tenant: "acme", Item: "new", Version: 1, Marker: 7, VisibleBy: at(45)})
	cases := []struct {
		name string
		a    Answer
		want Kind // "" = no violation
	}{
		{"current value", ok("acme", "i1", 2, at(20)), ""},
		{"replaced 29s ago: inside the bound", ok("acme", "i1", 2, at(79)), ""},
		{"replaced 31s ago: stale", ok("acme", "i1", 2, at(81)), KindStale},
		{"rewritten without a new version 29s ago: inside the bound", ok("acme", "new", 1, at(74)), ""},
		{"rewritten without a new version 31s ago, marker missing: stale", ok("acme", "new", 1, at(76)), KindStale},
		{"rewritten without a new version 31s ago, marker carried", with(ok("acme", "new", 1, at(76)), func(a *Answer) { a.PayloadUnbumped = 7 }), ""},
		{"v1 replaced 40s before", ok("acme", "i1", 1, at(50)), KindStale},
		{"served before its commit", ok("acme", "i1", 3, at(49)), KindUncommitted},
		{"never committed", ok("acme", "i1", 7, at(60)), KindUncommitted},
		{"rolled back version between known ones", ok("acme", "new", 0, at(60)), KindUncommitted},
		{"the deletion served as a value", ok("acme", "i1", 4, at(120)), KindDeletedServed},
		{"below min_version", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.MinVersion = 4 }), KindBelowMin},
		{"other tenant's payload", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.PayloadTenant = "globex" }), KindWrongOwner},
		{"other item's payload", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.PayloadItem = "i2" }), KindWrongOwner},
		{"payload of another version", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.PayloadVersion = 2 }), KindPayload},
		{"another table's row at a current version", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.PayloadTable = "shop.offers" }), KindForeignRow},
		{"304 vouching for another table's row", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.Status, a.PayloadTable = 304, "shop.offers" }), KindForeignRow},
		{"404 before creation", Answer{Tenant: "acme", Item: "new", Status: 404, Sent: at(35), Received: at(35)}, ""},
		{"404 within bound of creation", Answer{Tenant: "acme", Item: "new", Status: 404, Sent: at(65), Received: at(65)}, ""},
		{"404 long after creation", Answer{Tenant: "acme", Item: "new", Status: 404, Sent: at(75), Received: at(75)}, KindWrong404},
		{"404 after deletion", Answer{Tenant: "acme", Item: "i1", Status: 404, Sent: at(101), Received: at(101)}, ""},
		{"404 while it existed", Answer{Tenant: "acme", Item: "i1", Status: 404, Sent: at(60), Received: at(60)}, KindWrong404},
		{"404 of an item never created", Answer{Tenant: "acme", Item: "nope", Status: 404, Sent: at(60), Received: at(60)}, ""},
		{"412 while below", Answer{Tenant: "acme", Item: "i1", MinVersion: 3, Status: 412, Sent: at(60), Received: at(60)}, ""},
		{"412 at or above for the whole window", Answer{Tenant: "acme", Item: "i1", MinVersion: 3, Status: 412, Sent: at(90), Received: at(90)}, KindWrong412},
		{"503 is never a violation", Answer{Tenant: "acme", Item: "i1", Status: 503, Sent: at(90), Received: at(90)}, ""},
		{"304 for the asker's own current body", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.Status = 304 }), ""},
		{"304 for the asker's own replaced body", with(ok("acme", "i1", 2, at(81)), func(a *Answer) { a.Status = 304 }), KindStale},
		{"304 vouching for another tenant's body", with(ok("acme", "i1", 3, at(60)), func(a *Answer) { a.Status, a.PayloadTenant = 304, "globex" }), KindETag},
		{"400 for a min_version the source held", Answer{Tenant: "acme", Item: "i1", MinVersion: 3, Status: 400, Sent: at(60), Received: at(60)}, KindMinVersionRefused},
		{"400 for a min_version no write produced", Answer{Tenant: "acme", Item: "i1", MinVersion: 9, Status: 400, Sent: at(60), Received: at(60)}, ""},
	}
	seen := map[Kind]bool{}
	for _, tc := range cases {
		v := c.Check(tc.a, src)
		if judged(t, tc.name, v, tc.want) && tc.want != "" {
			seen[tc.want] = true
			if len(v.Violations[0].History) == 0 && tc.a.Item != "nope" {
				t.Errorf("%s: no source history in the evidence", tc.name)
			}
		}
	}
	for _, k := range Kinds {
		if !seen[k] && k != KindPipelineStopped { // judged by the fault bad-version-row, not from an answer
			t.Errorf("no planted violation of kind %s", k)
		}
	}
	if v := c.Check(ok("acme", "i1", 2, at(81)), src); v.Age < 30*time.Second {
		t.Errorf("age of a value replaced 31 s earlier = %s", v.Age)
	}
}

// A commit a backend held invisible (waiting for a synchronous standby)
// replaces the version before it only once a snapshot could see it: the
// old version served meanwhile, and up to the bound after, is no violation;
// served a bound after it became visible, it is stale.
func TestCheckerJudgesByVisibility(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	src := NewSource()
	src.Add(Commit{Tenant: "acme", Item: "i1", Version: 1, At: t0})
	// Committed at +10 s, invisible until between +44 s and +45 s.
	src.Add(Commit{Tenant: "acme", Item: "i1", Version: 2, At: at(10), VisibleAfter: at(44), VisibleBy: at(45)})
	c := Checker{Bound: 30 * time.Second}
	for _, tc := range []struct {
		name string
		a    Answer
		want Kind
	}{
		{"old version while the new one is invisible", ok("acme", "i1", 1, at(43)), ""},
		{"old version 29 s after visibility", ok("acme", "i1", 1, at(74)), ""},
		{"old version 31 s after visibility", ok("acme", "i1", 1, at(76)), KindStale},
		{"new version before any snapshot could see it", ok("acme", "i1", 2, at(20)), KindUncommitted},
		{"412 for the new version while it is invisible", Answer{Tenant: "acme", Item: "i1", MinVersion: 2, Status: 412, Sent: at(70), Received: at(70)}, ""},
	} {
		judged(t, tc.name, c.Check(tc.a, src), tc.want)
	}
}

func TestCheckerAfterPrune(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	src := plantedSource(t0)
	src.Prune(t0.Add(60 * time.Second)) // forgets v1 (v2 is kept as the version before v3)
	c := Checker{Bound: 30 * time.Second}
	if v := c.Check(ok("acme", "i1", 1, t0.Add(95*time.Second)), src); len(v.Violations) == 0 || v.Violations[0].Kind != KindStale {
		t.Fatalf("a pruned version served: %+v, want stale", v.Violations)
	}
	if v := c.Check(Answer{Tenant: "acme", Item: "i1", Status: 404, Sent: t0.Add(95 * time.Second), Received: t0.Add(95 * time.Second)}, src); len(v.Violations) == 0 {
		t.Fatal("a 404 of an item that existed long before the pruned history passed")
	}
	if v := c.Check(ok("acme", "i1", 3, t0.Add(95*time.Second)), src); len(v.Violations) != 0 {
		t.Fatalf("current value after prune: %+v", v.Violations)
	}
}

func TestReportRendersVerdictAndEvidence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	src := plantedSource(t0)
	c := Checker{Bound: 30 * time.Second}
	a := ok("acme", "i1", 2, t0.Add(81*time.Second))
	v := c.Check(a, src)
	st := answerStats{Answers: 1, Checked: 1, ByStatus: map[int]int64{200: 1}, Violations: 1, ByKind: map[Kind]int64{KindStale: 1},
		First: v.Violations, WorstAge: v.Age, WorstAgeOf: &a, perSecond: map[int64]*[2]int64{a.Received.Unix(): {1, 1}}}
	rep := &Report{Bound: Duration(30 * time.Second)}
	rep.summarise(&st, nil, nil, nil, t0, t0.Add(90*time.Second))
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAIL", "stale 1", "GET /v1/catalog/items/i1 as acme", "v2@12:00:10.000000", "v3@12:00:50.000000"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["violations"].(float64) != 1 || back["worst_observation_age"] != "31s" {
		t.Errorf("json report: violations %v, worst age %v", back["violations"], back["worst_observation_age"])
	}
	if rep.Pass() {
		t.Error("a report with a violation passes")
	}
}

// judged says whether v is what the case named name wants: its first
// violation of kind want, or none when want is empty; otherwise it fails t.
func judged(t *testing.T, name string, v Verdict, want Kind) bool {
	t.Helper()
	switch {
	case want == "" && len(v.Violations) > 0:
		t.Errorf("%s: unexpected %s: %s", name, v.Violations[0].Kind, v.Violations[0].Detail)
	case want != "" && (len(v.Violations) == 0 || v.Violations[0].Kind != want):
		t.Errorf("%s: got %v, want %s", name, v.Violations, want)
	default:
		return true
	}
	return false
}
