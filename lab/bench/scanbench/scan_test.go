package scanbench

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

// Validate names every broken field, the fill rates and the source budget
// by the api package's own rules.
func TestValidateNamesFields(t *testing.T) {
	good := DefaultConfig()
	good.Binary = "/bin/tidemark"
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults with a binary: %v", err)
	}
	bad := good
	bad.Binary, bad.HotItems, bad.ColdIDs, bad.Scanners, bad.Zipf = "", 1, 0, 0, 1
	bad.ForegroundRate, bad.FillRates, bad.Headroom, bad.Baseline, bad.GoalDrop = 0, []float64{20, -1}, 0, 0, 0
	var got []string
	for _, fe := range config.Fields(bad.Validate()) {
		got = append(got, fe.Field)
	}
	slices.Sort(got)
	want := []string{"Baseline", "Binary", "ColdIDs", "FillRates", "ForegroundRate", "GoalDrop", "Headroom", "HotItems", "Scanners", "Zipf"}
	if !slices.Equal(got, want) {
		t.Errorf("fields reported %v, want %v", got, want)
	}
	none := good
	none.FillRates = nil
	if err := none.Validate(); err == nil || !strings.Contains(err.Error(), "FillRates") {
		t.Errorf("no arms: %v", err)
	}
}

// The report's goal line judges each admission arm by the drop during the
// scan and leaves the admission-off arm out.
func TestReportJudgesAdmissionArms(t *testing.T) {
	r := Result{Config: DefaultConfig(), Arms: []Arm{
		{FillRate: 20, Before: Phase{Hits: 100, Reads: 100}, During: Phase{Hits: 97, Reads: 100}},
		{FillRate: 2000, Before: Phase{Hits: 100, Reads: 100}, During: Phase{Hits: 80, Reads: 100}},
		{FillRate: 0, Before: Phase{Hits: 100, Reads: 100}, During: Phase{Hits: 30, Reads: 100}},
	}}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"with fill rate 20: met (3.0 points)", "with fill rate 2000: NOT met (20.0 points)"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "with fill rate 0") {
		t.Errorf("report judges the admission-off arm:\n%s", md)
	}
}
