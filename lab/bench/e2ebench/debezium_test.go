package e2ebench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
)

// The bench tails the file Debezium's program appends to: a line is taken
// only once complete (the writer may be caught mid-line), each is one
// change, a change committed before `since` (the warm-up) is counted but
// not timed, latency is callback - commit to the microsecond, a note line
// is kept, and a line it cannot read is an error naming it.
func TestDebeziumSamplesTailsTheGrowingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "debezium.samples")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	appendFile := func(s string) {
		t.Helper()
		w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(s); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	const t0 = 1_764_700_000_000_000 // µs since the epoch
	d := &debeziumSamples{r: f}
	// Warm-up changes read before the measurement starts, a note.
	appendFile("# commit time: source.ts_us\n1764700000000000 1764700000002500\n")
	if err := d.read(); err != nil {
		t.Fatal(err)
	}
	d.record(time.UnixMicro(t0 + 1000))
	// A warm-up change read after it started (committed before), and half a line.
	appendFile("1764700000000500 1764700000003000\n1764700000001000 17647000000")
	if err := d.read(); err != nil {
		t.Fatal(err)
	}
	if d.seen != 2 || len(d.samples) != 0 || d.note != "commit time: source.ts_us" {
		t.Fatalf("after two warm-up lines, a note and half a line: seen %d, timed %d, note %q; want 2, 0 (committed before the measurement), the note", d.seen, len(d.samples), d.note)
	}
	appendFile("04250\n1764700000002000 1764700000019400\n")
	if err := d.read(); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{3250 * time.Microsecond, 17400 * time.Microsecond}
	if d.seen != 4 || len(d.samples) != len(want) {
		t.Fatalf("seen %d, timed %v; want 4 seen and %v", d.seen, d.samples, want)
	}
	for i, w := range want {
		if d.samples[i].d != w || !d.samples[i].commit.Equal(time.UnixMicro(t0+int64(i+1)*1000)) {
			t.Errorf("sample %d = %+v, want latency %s committed at t0+%d ms", i, d.samples[i], w, i+1)
		}
	}
	appendFile("1764700000003000 oops\n")
	if err := d.read(); err == nil || !strings.Contains(err.Error(), `"1764700000003000 oops"`) {
		t.Fatalf("a malformed line: err %v, want one naming the line", err)
	}
}

// The comparison issue 40 asks for: Debezium's commit → callback against
// tidemark's commit → applied at the single-row rate, the ratio to two
// decimals and the goal (≤ 1.0x) judged at p50 and p99, the ceiling of the
// same run beside them; the latency table gets Debezium's row too.
func TestDebeziumComparisonTable(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	res := Result{
		Config:   DefaultConfig(),
		Ceiling:  Dist{N: 120_000, P50: ms(0.54), P99: ms(3.36)},
		Debezium: &DebeziumPhase{Callback: Dist{N: 120_000, P50: ms(3.66), P99: ms(17.4)}, Load: loadResult{Commits: 120_000, Changes: 120_000, Elapsed: time.Minute}},
		Phases:   []Phase{{Name: "2000 single-row tx/s", Applied: Dist{N: 12_000, P50: ms(4.39), P99: ms(15.0)}}},
	}
	res.CeilingLoad = loadResult{Commits: 118_000, Elapsed: time.Minute}
	res.Phases[0].Load = loadResult{Commits: 120_000, Elapsed: time.Minute}
	res.CeilingBoxBusy, res.Debezium.BoxBusy, res.Phases[0].BoxBusy = 0.5, 1.25, 1.5
	tab, ok := res.debeziumTable()
	if !ok || len(tab.Rows) != 4 {
		t.Fatalf("table %v (ok %v), want p50, p99, achieved rate and busy rows", tab, ok)
	}
	cores := runtime.NumCPU()
	for i, want := range [][]string{
		{"p50", "0.54 ms", "3.66 ms", "4.39 ms", "1.20x", "MISSED"},
		{"p99", "3.36 ms", "17.40 ms", "15.00 ms", "0.86x", "met"},
		{"achieved tx/s", "1967", "2000", "2000", "", ""},
		{"machine CPU busy during the load (cores, every process)", fmt.Sprintf("0.50 of %d", cores), fmt.Sprintf("1.25 of %d", cores), fmt.Sprintf("1.50 of %d", cores), "", ""},
	} {
		if got := strings.Join(tab.Rows[i], " | "); got != strings.Join(want, " | ") {
			t.Errorf("row %d: %s\nwant: %s", i, got, strings.Join(want, " | "))
		}
	}
	// A change Debezium never delivered voids a win.
	res.Debezium.Unseen = 1
	if tab, _ := res.debeziumTable(); tab.Rows[1][5] != "MISSED" {
		t.Errorf("p99 judged %q with a change Debezium did not deliver, want MISSED (the run is incomplete)", tab.Rows[1][5])
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| Debezium 3.6.1.Final embedded commit → callback | 2000 tx/s | 120000 | 3.66 ms |", "against Debezium 3.6.1.Final embedded",
		"poll.interval.ms=1", "max.batch.size=256"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	if got := svgcharttest.Parse(t, Chart(res).String()).Count("point", "Debezium p99"); got != 1 {
		t.Errorf("chart: %d points of Debezium's p99, want 1", got)
	}
	if _, ok := (Result{Phases: res.Phases}).debeziumTable(); ok {
		t.Error("a run without the Debezium arm got a comparison table")
	}
}
